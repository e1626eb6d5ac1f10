"""kill -9 in the middle of migrations: of the gateway, then of the scheduler. Each migration either
completes or rolls back, every VM runs on exactly the host PostgreSQL says, no host is overcommitted,
and once reconciled the Redis snapshot holds what PostgreSQL says. And a migration whose target
never answers is rolled back after VMSCHED_MIGRATION_TIMEOUT."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from devtools.stack import Stack
from tests.faults.conftest import fault_stack, online_fleet
from tests.faults.invariants import check
from tests.integration.moving import claims_of, disagreements, host_shares
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

SUITE = "mcrash"
HOSTS = 6
VMS = 18
MOVES = 12
VM = {"cpu": 2, "memory_mb": 2048, "disk_gb": 20, "labels": {"suite": SUITE}}


@pytest.fixture(scope="module")
def crash_stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(
        servers,
        Path(tmp_path_factory.mktemp("migration-crash-logs")),
        schedulers=1,
        VMSCHED_RECONCILE_INTERVAL="3",
        # A step whose command a crash lost is sent again this soon; none is left to time out.
        VMSCHED_RESEND_STALE_AFTER="4",
        VMSCHED_MIGRATION_TIMEOUT="25",
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
async def crash_fleet(crash_stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(
        crash_stack, servers, SUITE, HOSTS, Resources(cpu=64, memory_mb=65536, disk_gb=2000), heartbeat_interval=1.0
    ) as fleet:
        for hypervisor in fleet.hypervisors.values():
            hypervisor.migration_delay = 0.3  # a migration takes about a second: the crashes land mid-flight
        yield fleet


async def _running_vms(api: httpx.AsyncClient, count: int, name: str) -> list[dict[str, object]]:
    response = await api.post("/v1/vms/batch", json={"vms": [{"name": f"{name}-{i}", **VM} for i in range(count)]})
    assert response.status_code == 202, response.text
    ids = [vm["id"] for vm in response.json()["items"]]
    await eventually(
        lambda: asyncio.gather(*(api.get(f"/v1/vms/{vm_id}") for vm_id in ids)),
        lambda found: all(r.json()["status"] == "running" for r in found),
        timeout=60,
        what=f"{count} VMs running",
    )
    return [(await api.get(f"/v1/vms/{vm_id}")).json() for vm_id in ids]


async def _in_flight(servers: Servers, vm_ids: list[str]) -> int:
    """How many of the VMs have a migration target claimed (moving now)."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM vms WHERE id = ANY($1::uuid[]) AND migration_target IS NOT NULL", vm_ids
        )
        return count
    finally:
        await conn.close()


async def _rows_of_hosts(servers: Servers) -> list[str]:
    """The suite's hosts and every VM on them or moving to them, as PostgreSQL has them now: what a
    failed check shows, so that a broken invariant says how it broke."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        hosts = await conn.fetch("SELECT id, alloc_cpu, vm_count FROM hosts WHERE id LIKE $1 ORDER BY id", f"{SUITE}%")
        vms = await conn.fetch(
            "SELECT id, name, status, task, hypervisor_id, migration_target, migrations, cpu, updated_at FROM vms"
            " WHERE hypervisor_id LIKE $1 OR migration_target LIKE $1 ORDER BY hypervisor_id, updated_at",
            f"{SUITE}%",
        )
    finally:
        await conn.close()
    return [str(dict(row)) for row in (*hosts, *vms)]


async def _all_settled(api: httpx.AsyncClient, vm_ids: list[str]) -> list[dict[str, object]]:
    found = await eventually(
        lambda: asyncio.gather(*(api.get(f"/v1/vms/{vm_id}") for vm_id in vm_ids)),
        lambda rs: all(r.json()["status"] == "running" and r.json()["task"] is None for r in rs),
        timeout=120,
        what="every migration completed or rolled back",
        interval=0.5,
    )
    return [r.json() for r in found]


async def _check_after(
    servers: Servers, fleet: SimulatedFleet, vms: list[dict[str, object]], before: dict[str, object]
) -> tuple[int, int]:
    """The invariants once every migration ended; (moved, rolled back)."""
    ids = [str(vm["id"]) for vm in vms]
    report = await check(servers.asyncpg_dsn, ids)
    assert report.problems == [], (report.problems, await _rows_of_hosts(servers))
    assert report.by_status == {"running": len(ids)}
    hosts = sorted(fleet.agents)
    # Redis holds what PostgreSQL says once reconciled (a target claim left behind by the crash is
    # kept while it may still be in flight, then dropped).
    await eventually(
        lambda: host_shares(servers, hosts),
        lambda shares: disagreements(shares) == [],
        timeout=90,
        what="the snapshot reconciled with PostgreSQL",
        interval=1.0,
    )
    # Each VM runs on exactly the host PostgreSQL holds it on.
    await eventually(
        lambda: asyncio.sleep(0, [fleet.host_of(uuid.UUID(str(vm["id"]))) for vm in vms]),
        lambda seen: seen == [vm["hypervisor_id"] for vm in vms],
        timeout=30,
        what="every agent running what PostgreSQL says it runs",
    )
    moved = sum(1 for vm in vms if vm["hypervisor_id"] != before[str(vm["id"])])
    return moved, len(vms) - moved


async def test_kill_9_of_the_gateway_mid_migration_completes_or_rolls_back_each(
    crash_stack: Stack, crash_fleet: SimulatedFleet, servers: Servers
) -> None:
    async with crash_stack.async_client(timeout=60) as api:
        vms = await _running_vms(api, VMS, f"{SUITE}-gw")
        moving = vms[:MOVES]
        before = {str(vm["id"]): vm["hypervisor_id"] for vm in vms}
        for vm in moving:
            assert (await api.post(f"/v1/vms/{vm['id']}/migrate", json={})).status_code == 202
        ids = [str(vm["id"]) for vm in moving]
        await eventually(lambda: _in_flight(servers, ids), lambda n: n >= 3, timeout=30, what="migrations in flight")
        crash_stack.services["gateway"].kill()
        crash_stack.start_gateway()
        await asyncio.to_thread(_wait_ready, crash_stack, "gateway")
        after = await _all_settled(api, ids)
    moved, rolled_back = await _check_after(servers, crash_fleet, after, before)
    print(f"gateway kill -9: {MOVES} migrations -> {moved} moved, {rolled_back} rolled back")
    assert moved + rolled_back == MOVES


async def test_kill_9_of_the_scheduler_mid_migration_completes_or_rolls_back_each(
    crash_stack: Stack, crash_fleet: SimulatedFleet, servers: Servers
) -> None:
    async with crash_stack.async_client(timeout=60) as api:
        vms = await _running_vms(api, VMS, f"{SUITE}-sched")
        moving = vms[:MOVES]
        before = {str(vm["id"]): vm["hypervisor_id"] for vm in vms}
        ids = [str(vm["id"]) for vm in moving]
        for vm in moving:
            assert (await api.post(f"/v1/vms/{vm['id']}/migrate", json={})).status_code == 202
        await eventually(lambda: _in_flight(servers, ids), lambda n: n >= 1, timeout=30, what="a target claimed")
        crash_stack.services["scheduler-1"].kill()
        crash_stack.start_scheduler(1)
        await asyncio.to_thread(_wait_ready, crash_stack, "scheduler-1")
        after = await _all_settled(api, ids)
    moved, rolled_back = await _check_after(servers, crash_fleet, after, before)
    print(f"scheduler kill -9: {MOVES} migrations -> {moved} moved, {rolled_back} rolled back")
    assert moved + rolled_back == MOVES


async def test_a_migration_whose_target_never_answers_is_rolled_back_after_the_timeout(
    crash_stack: Stack, crash_fleet: SimulatedFleet, servers: Servers
) -> None:
    async with crash_stack.async_client(timeout=60) as api:
        (vm,) = await _running_vms(api, 1, f"{SUITE}-silent")
        source = str(vm["hypervisor_id"])
        target = next(host for host in sorted(crash_fleet.agents) if host != source)
        await crash_fleet.cut_off(target)  # still online to vmsched for a while: it may be chosen
        try:
            response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": target})
            assert response.status_code == 202, response.text
            await eventually(
                lambda: _in_flight(servers, [str(vm["id"])]), lambda n: n == 1, timeout=30, what="the target claimed"
            )
            (after,) = await _all_settled(api, [str(vm["id"])])
        finally:
            await crash_fleet.reconnect(target)
    assert (after["status"], after["hypervisor_id"], after["migration_target"]) == ("running", source, None)
    assert "VMSCHED_MIGRATION_TIMEOUT" in str(after["status_reason"]), after["status_reason"]
    # The rollback is committed in PostgreSQL first, then the target's claim released in Redis
    # (over-counting meanwhile, never under).
    await eventually(
        lambda: claims_of(servers, str(vm["id"])),
        lambda claims: claims == {"claim": source, "target": None},
        timeout=30,
        what="the target's claim released in Redis",
    )
    report = await check(servers.asyncpg_dsn, [str(vm["id"])])
    assert report.problems == []
    # Back on the network, the target carries out what waited in its queue, the abort last: it
    # keeps nothing of the VM.
    await eventually(
        lambda: asyncio.sleep(0, uuid.UUID(str(vm["id"])) in crash_fleet.hypervisors[target].vms),
        lambda held: not held,
        timeout=30,
        what="the target dropped what it prepared",
    )
    assert crash_fleet.host_of(uuid.UUID(str(vm["id"]))) == source


def _wait_ready(stack: Stack, name: str) -> None:
    from devtools.stack import wait_for

    wait_for(stack.services[name].is_ready, 60, f"{name} ready again")
