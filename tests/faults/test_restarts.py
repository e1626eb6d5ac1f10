"""Redis, then PostgreSQL, killed and started again while simulated agents place VMs: no accepted VM
lost, no host overcommitted, every VM on exactly one host, and the snapshot rebuilt equal to
PostgreSQL.

Both servers are this module's own (devtools.private_servers): killing the machine's shared Redis or
PostgreSQL would break every other test run on it. RabbitMQ is the run's own virtual host.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devtools.private_servers import PostgresServer, RedisServer, private_postgres, private_redis
from devtools.stack import Stack
from tests.faults.conftest import fault_stack, mixed_vm, online_fleet, submit, unsettled, wait_running, wait_settled
from tests.faults.invariants import check, snapshot_problems
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = [pytest.mark.slow, pytest.mark.own_servers]

SUITE = "restart"
HOSTS = 20
VMS = 600
SCHEDULERS = 2
STRIKE_AFTER = 100  # VMs running when the strike comes


@dataclasses.dataclass
class Own:
    servers: Servers
    redis: RedisServer
    postgres: PostgresServer


@pytest.fixture(scope="module")
def own(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Own]:
    with private_redis(tmp_path_factory.mktemp("redis")) as redis, private_postgres() as postgres:
        yield Own(dataclasses.replace(servers, redis_url=redis.url, database_url=postgres.url), redis, postgres)


@pytest.fixture(scope="module")
def restart_stack(own: Own, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # No heartbeat is folded while PostgreSQL is down; 60 s keeps a slow restart on this shared
    # machine from making hosts offline, which is not what this module is about.
    with fault_stack(
        own.servers,
        Path(tmp_path_factory.mktemp("restart-logs")),
        schedulers=SCHEDULERS,
        VMSCHED_AGENT_OFFLINE_TIMEOUT="60",
        VMSCHED_RESEND_STALE_AFTER="10",
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
async def restart_fleet(restart_stack: Stack, own: Own) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(
        restart_stack,
        own.servers,
        SUITE,
        HOSTS,
        Resources(cpu=128, memory_mb=128 * 1024, disk_gb=4000),
        heartbeat_interval=1.0,
    ) as fleet:
        yield fleet


async def place_through(
    stack: Stack, own: Own, fleet: SimulatedFleet, seed: int, strike: str
) -> tuple[int, dict[str, int]]:
    """Submit VMS VMs, do ``strike`` once 100 run (the agents hold every later create until it has
    struck, so it strikes mid-run however fast the rest is), wait for every VM to settle; the
    invariants hold and the snapshot equals PostgreSQL again. How many VMs were still on their way
    when it struck, and the VMs by status."""
    servers = own.servers
    rng = random.Random(seed)
    async with stack.async_client(timeout=120) as api:
        bodies = [mixed_vm(rng, i, f"{SUITE}-{strike}") | {"labels": {"suite": SUITE}} for i in range(VMS)]
        gate = fleet.hold_creates(allowed=STRIKE_AFTER)
        try:
            vm_ids = await submit(api, bodies)
            await wait_running(servers, vm_ids, STRIKE_AFTER)
            on_their_way = await unsettled(servers, vm_ids)
            if strike == "redis":
                await asyncio.to_thread(own.redis.kill)
                await asyncio.to_thread(own.redis.start)  # empty, as a Redis without persistence comes back
            else:
                await asyncio.to_thread(own.postgres.kill)
                await asyncio.to_thread(own.postgres.start)  # recovers from its WAL
        finally:
            gate.open()
        await wait_settled(servers, vm_ids, timeout=240)
    report = await check(servers.asyncpg_dsn, vm_ids, fleet)
    assert report.problems == []
    assert report.by_status == {"running": VMS}, report.by_status
    await eventually(
        lambda: snapshot_problems(servers.asyncpg_dsn, servers.redis_url, servers.redis_key_prefix, f"{SUITE}-"),
        lambda problems: problems == [],
        timeout=60,
        what="the Redis snapshot equal to PostgreSQL",
        interval=1.0,
    )
    # Only STRIKE_AFTER creates passed the gate before the strike: the rest were on their way.
    assert on_their_way == VMS - STRIKE_AFTER, "struck after the run, not in the middle of it"
    return on_their_way, report.by_status


async def test_redis_killed_and_started_empty_mid_run_loses_nothing_and_is_rebuilt_from_postgresql(
    restart_stack: Stack, restart_fleet: SimulatedFleet, own: Own
) -> None:
    on_their_way, by_status = await place_through(restart_stack, own, restart_fleet, 21, "redis")
    print(f"\nRedis killed -9 and started empty with {on_their_way} of {VMS} VMs on their way -> {by_status}")


async def test_postgresql_killed_and_started_mid_run_loses_nothing(
    restart_stack: Stack, restart_fleet: SimulatedFleet, own: Own
) -> None:
    on_their_way, by_status = await place_through(restart_stack, own, restart_fleet, 22, "postgres")
    print(
        f"\nPostgreSQL stopped at once (no checkpoint) and started with {on_their_way} of {VMS} VMs on their way "
        f"-> {by_status}"
    )
