"""Four scheduler processes race for fifty nearly full hosts with 5,000 VMs at once."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from devtools.stack import Stack
from tests.faults.conftest import fault_stack, mixed_vm, online_fleet, submit, wait_settled
from tests.faults.events import EventCounter
from tests.faults.invariants import check
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

SUITE = "race"
HOSTS = 50
VMS = 5000


@pytest.fixture(scope="module")
def race_stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(
        servers,
        Path(tmp_path_factory.mktemp("race-logs")),
        schedulers=4,
        VMSCHED_RECONCILE_INTERVAL="5",
        VMSCHED_SCHEDULER_PREFETCH="64",
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
async def race_fleet(race_stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(
        race_stack, servers, SUITE, HOSTS, Resources(cpu=96, memory_mb=96 * 1024, disk_gb=2000), heartbeat_interval=2.0
    ) as fleet:
        yield fleet


async def test_four_schedulers_never_overcommit_and_place_each_vm_once(
    race_stack: Stack, race_fleet: SimulatedFleet, servers: Servers
) -> None:
    rng = random.Random(4)
    async with (
        EventCounter(servers.amqp_url, "vm.assigned") as assigned,
        race_stack.async_client(timeout=120) as api,
    ):
        vm_ids = await submit(api, [mixed_vm(rng, i, SUITE) for i in range(VMS)])
        assert len(vm_ids) == VMS
        await wait_settled(servers, vm_ids, timeout=300)
        report = await check(servers.asyncpg_dsn, vm_ids, race_fleet)
        await eventually(
            lambda: _async(len(assigned.by_vm)),
            lambda n: n >= report.placed,
            timeout=30,
            what="every vm.assigned to arrive",
        )
    print(f"race: {VMS} VMs, {HOSTS} hosts, 4 schedulers -> {report.by_status}")
    assert report.problems == []
    assert report.placed > VMS // 2  # the fleet filled up, the rest found no room
    assert report.by_status.get("unschedulable", 0) > 0
    # Every placed VM announced, and always on the one host PostgreSQL holds it on. A VM may be
    # announced more than once: delivery is at least once, and a vm.create sent again (redelivered,
    # or republished by the outbox's sweeper before its first publish was marked) meets a row
    # already scheduled, and its round announces it again, under that round's message id.
    placed = {vm_id for vm_id in assigned.by_vm if vm_id in set(vm_ids)}
    assert len(placed) == report.placed
    hosts = await placed_hosts(servers, vm_ids)
    for vm_id, announced in assigned.hosts_by_vm.items():
        if vm_id in hosts:
            assert set(announced) == {hosts[vm_id]}, (vm_id, announced, hosts[vm_id])
    again = sum(1 for ids in assigned.by_vm.values() if len(ids) > 1)
    print(f"race: {again} VMs announced more than once (same host each time)")


async def placed_hosts(servers: Servers, vm_ids: list[str]) -> dict[str, str]:
    """vm_id -> the host PostgreSQL holds it on, for the placed ones."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        rows = await conn.fetch(
            "SELECT id::text, hypervisor_id FROM vms WHERE id = ANY($1::uuid[]) AND hypervisor_id IS NOT NULL", vm_ids
        )
    finally:
        await conn.close()
    return {row["id"]: row["hypervisor_id"] for row in rows}


async def _async(value: int) -> int:
    return value
