"""Four scheduler processes race for fifty nearly full hosts with 5,000 VMs at once."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from devtools.stack import Stack
from tests.faults.conftest import fault_stack, mixed_vm, online_fleet, submit, wait_settled
from tests.faults.events import EventCounter
from tests.faults.invariants import check
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_common.messages import Resources

pytestmark = [pytest.mark.integration, pytest.mark.slow]

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
        httpx.AsyncClient(base_url=race_stack.api_url, timeout=120) as api,
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
    # one vm.assigned per placed VM: repeats (after a redelivery) carry the same message_id
    placed = {vm_id for vm_id in assigned.by_vm if vm_id in set(vm_ids)}
    assert len(placed) == report.placed
    assert all(len(set(ids)) == 1 for ids in assigned.by_vm.values())


async def _async(value: int) -> int:
    return value
