"""Four scheduler replicas place new VMs while a drain empties a busy host (issue 15): the targets the
drain's migrations take and the new VMs race for the same last room. At every sample no host is
overcommitted (migration targets and held reservation slots counted, tests/faults/invariants.py); in
the end no VM is lost and each runs on exactly one host, the one PostgreSQL and Redis hold it on."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from uuid import UUID

import asyncpg
import pytest

from devtools.stack import Stack
from tests.faults.conftest import fault_stack, mixed_vm, online_fleet, submit, wait_settled
from tests.faults.invariants import check, snapshot_problems
from tests.integration.moving import open_only, settled
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

SUITE = "drq"
HOSTS = 6
BUSY = f"{SUITE}-0001"
CAPACITY = Resources(cpu=16, memory_mb=16384, disk_gb=400)
ON_BUSY = 16  # 1 CPU each: the busy host full
NEW = 48  # mixed sizes (about 60 CPUs): with the drain's 16, nearly the 80 CPUs the others have
DEADLINE_S = 30
WAVE = 12  # new VMs per POST, a second apart


@pytest.fixture(scope="module")
def drain_stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(
        servers,
        Path(tmp_path_factory.mktemp("drain-race-logs")),
        schedulers=4,
        VMSCHED_RECONCILE_INTERVAL="5",
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
async def drain_fleet(drain_stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(drain_stack, servers, SUITE, HOSTS, CAPACITY, heartbeat_interval=1.0) as fleet:
        yield fleet


async def _count_running_on(servers: Servers, vm_ids: list[str], host_id: str) -> int:
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        found: int = await conn.fetchval(
            "SELECT count(*) FROM vms WHERE id = ANY($1::uuid[]) AND status = 'running' AND hypervisor_id = $2",
            vm_ids,
            host_id,
        )
    finally:
        await conn.close()
    return found


async def _hosts_of(servers: Servers, vm_ids: list[str]) -> dict[str, tuple[str, str | None]]:
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        rows = await conn.fetch("SELECT id::text, status, hypervisor_id FROM vms WHERE id = ANY($1::uuid[])", vm_ids)
    finally:
        await conn.close()
    return {row["id"]: (row["status"], row["hypervisor_id"]) for row in rows}


async def test_four_schedulers_placing_while_a_busy_host_drains_never_overcommit_nor_lose_a_vm(
    drain_stack: Stack, drain_fleet: SimulatedFleet, servers: Servers
) -> None:
    rng = random.Random(15)
    async with drain_stack.async_client(timeout=60) as api:
        # The busy host: full, every other host paused while it fills.
        await open_only(api, list(drain_fleet.agents), BUSY)
        on_busy = await submit(
            api, [{"name": f"{SUITE}-busy-{n}", "cpu": 1, "memory_mb": 512, "disk_gb": 10} for n in range(ON_BUSY)]
        )
        await eventually(
            lambda: _count_running_on(servers, on_busy, BUSY),
            lambda n: n == ON_BUSY,
            timeout=60,
            what=f"{ON_BUSY} VMs running on {BUSY}",
        )
        for hypervisor in drain_fleet.hypervisors.values():
            hypervisor.migration_delay = 0.2  # migrations stay in flight long enough to be sampled
        await open_only(api, list(drain_fleet.agents), *drain_fleet.agents)

        # The drain first (it pauses the busy host: no new VM lands there), then the new VMs in waves
        # a second apart while the drain's migrations run.
        started = await api.post(f"/v1/hosts/{BUSY}/drain", json={"max_parallel": 4, "deadline_s": DEADLINE_S})
        assert started.status_code == 202, started.text
        new: list[str] = []

        async def waves() -> None:
            bodies = [mixed_vm(rng, n, SUITE) for n in range(NEW)]
            for first in range(0, NEW, WAVE):
                new.extend(await submit(api, bodies[first : first + WAVE]))
                await asyncio.sleep(1.0)  # pacing the load, not waiting for anything

        submitting = asyncio.create_task(waves())
        samples, most_migrating, raced = 0, 0, 0
        ends = time.monotonic() + DEADLINE_S + 30
        while time.monotonic() < ends:
            report = await check(servers.asyncpg_dsn, on_busy + new)
            overcommitted = [p for p in report.problems if "overcommitted" in p]
            assert overcommitted == [], overcommitted
            samples += 1
            migrating = report.by_status.get("migrating", 0)
            most_migrating = max(most_migrating, migrating)
            placing = report.by_status.get("pending", 0) + report.by_status.get("scheduled", 0)
            raced += bool(migrating and (placing or not submitting.done()))
            progress = (await api.get(f"/v1/hosts/{BUSY}/drain")).json()
            if submitting.done() and progress["state"] != "draining" and report.by_status.get("pending", 0) == 0:
                break
            await asyncio.sleep(0.2)
        await submitting
        assert len(new) == NEW
        everyone = on_busy + new
        assert progress["state"] in ("drained", "timed_out"), progress
        assert samples >= 5
        assert raced >= 1  # some sample saw migrations in flight while new VMs were being placed

        await wait_settled(servers, everyone, timeout=60)
        for vm_id in on_busy:  # the task of a migration ended: nothing migrating any more
            await settled(api, vm_id)
        report = await check(servers.asyncpg_dsn, everyone)
        assert report.problems == []
        held = await _hosts_of(servers, everyone)
        moved = {m["vm_id"] for m in progress["moved"]}
        stuck = {s["vm_id"] for s in progress["stuck"]}
        print(
            f"drain race: {report.by_status}, {samples} samples ({raced} racing), at most {most_migrating} migrating, "
            f"drain {progress['state']}: {len(moved)} moved, {len(stuck)} left"
        )

        # Not lost: every VM of the busy host still runs; moved ones elsewhere, the rest where they were.
        for vm_id in on_busy:
            status, where = held[vm_id]
            assert status == "running", (vm_id, status)
            assert (where != BUSY) == (vm_id in moved), (vm_id, where, vm_id in moved)
        assert moved | stuck == set(on_busy)
        assert len(moved) >= 1
        assert report.by_status.get("running", 0) > ON_BUSY  # new VMs were placed alongside the drain

        # Exactly one host runs each running VM: the one PostgreSQL holds it on.
        for vm_id, (status, where) in held.items():
            runners = [h for h, hypervisor in drain_fleet.hypervisors.items() if UUID(vm_id) in hypervisor.vms]
            expected = [where] if status == "running" else []
            assert runners == expected, (vm_id, status, where, runners)

        # And the schedulers' snapshot agrees with PostgreSQL, claim by claim.
        problems = await eventually(
            lambda: snapshot_problems(servers.asyncpg_dsn, servers.redis_url, servers.redis_key_prefix, f"{SUITE}-"),
            lambda found: found == [],
            timeout=30,
            what="Redis agreeing with PostgreSQL",
        )
        assert problems == []
