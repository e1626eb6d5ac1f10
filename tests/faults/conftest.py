"""Fault and concurrency tests: each module runs its own stack, so killing things harms no other test."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx

from devtools.stack import Stack, free_port
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import Profile, generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

# Seconds each service of a fault stack may take to be ready. Its processes start at once and each
# imports for seconds of CPU: on 2 shared cores the gateway beside four schedulers was ready 16-29 s
# after the API, and 46 s after it at a load average of 13 (tests/faults/races, 24 runs); a service
# that exits is reported at once whatever this is (Service.check_alive).
START_TIMEOUT = 120.0


@contextlib.contextmanager
def fault_stack(servers: Servers, log_dir: Path, *, schedulers: int, **env: str) -> Iterator[Stack]:
    """A stack of this module's own, so what a test kills harms no other module."""
    stack = Stack(
        env=servers.env(VMSCHED_REPUBLISH_AFTER="2", VMSCHED_RATE_LIMIT="0", **env),
        log_dir=log_dir,
        api_port=free_port(),
    )
    with stack.running(schedulers=schedulers, timeout=START_TIMEOUT):
        yield stack


@contextlib.asynccontextmanager
async def online_fleet(
    stack: Stack,
    servers: Servers,
    suite: str,
    count: int,
    capacity: Resources,
    heartbeat_interval: float,
    *,
    own_users: bool = True,
) -> AsyncIterator[SimulatedFleet]:
    """``count`` uniform simulated hosts labelled ``suite=<suite>``, yielded once all are online.
    ``own_users``: each host enrolled and connected as its own broker user (the gateway's default
    wants it); else they share ``servers``' user (for a stack with VMSCHED_AGENT_AUTH=off)."""
    hosts = generate_hosts(count, prefix=suite, capacity=capacity, profile=Profile.UNIFORM, labels={"suite": suite})
    simulated = (
        await enrolled_fleet(servers, hosts, heartbeat_interval=heartbeat_interval)
        if own_users
        else SimulatedFleet(hosts, amqp_url=servers.amqp_url, heartbeat_interval=heartbeat_interval)
    )
    async with simulated as fleet:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"].startswith(suite) and h["status"] == "online") == count,
                timeout=60,
                what=f"the {suite} fleet online",
            )
        yield fleet


def mixed_vm(rng: random.Random, index: int, suite: str) -> dict[str, object]:
    return {
        "name": f"{suite}-{index}",
        "cpu": rng.choice([1, 1, 1, 2]),
        "memory_mb": rng.choice([512, 768, 1024]),
        "disk_gb": rng.choice([5, 10, 20]),
        "labels": {"suite": suite},
    }


async def submit(api: httpx.AsyncClient, bodies: list[dict[str, object]], batch: int = 500) -> list[str]:
    """POST the VMs in concurrent batches; the ids the API accepted."""

    async def one(chunk: list[dict[str, object]]) -> list[str]:
        response = await api.post("/v1/vms/batch", json={"vms": chunk})
        assert response.status_code == 202, response.text
        return [vm["id"] for vm in response.json()["items"]]

    chunks = [bodies[i : i + batch] for i in range(0, len(bodies), batch)]
    return [vm_id for ids in await asyncio.gather(*(one(c) for c in chunks)) for vm_id in ids]


# A VM is settled once its agent has answered: scheduled still waits for the agent's report.
UNSETTLED = ["pending", "scheduled", "deleting"]


async def count_in(servers: Servers, vm_ids: list[str], *statuses: str) -> int:
    """How many of ``vm_ids`` PostgreSQL has in one of ``statuses``."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM vms WHERE id = ANY($1::uuid[]) AND status = ANY($2::text[])", vm_ids, list(statuses)
        )
        return count
    finally:
        await conn.close()


async def wait_running(servers: Servers, vm_ids: list[str], at_least: int, timeout: float = 60) -> None:
    """Until ``at_least`` of ``vm_ids`` run: the moment a test strikes mid-run."""
    await eventually(
        lambda: count_in(servers, vm_ids, "running"),
        lambda n: n >= at_least,
        timeout=timeout,
        what=f"{at_least} VMs running",
    )


async def unsettled(servers: Servers, vm_ids: list[str]) -> int:
    return await count_in(servers, vm_ids, *UNSETTLED)


async def wait_settled(servers: Servers, vm_ids: list[str], timeout: float) -> None:
    await eventually(
        lambda: unsettled(servers, vm_ids),
        lambda n: n == 0,
        timeout=timeout,
        what="every VM settled (running, unschedulable, failed or deleted)",
        interval=0.5,
    )
