"""Crashes in the middle of a run: kill -9 of a scheduler, and a Redis flush. The invariants hold."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from devtools.stack import Stack
from tests.faults.conftest import fault_stack, mixed_vm, online_fleet, submit, wait_running, wait_settled
from tests.faults.events import EventCounter
from tests.faults.invariants import check
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

SUITE = "crash"
HOSTS = 30
VMS = 1200


@pytest.fixture(scope="module")
def crash_stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(
        servers, Path(tmp_path_factory.mktemp("crash-logs")), schedulers=2, VMSCHED_RECONCILE_INTERVAL="3"
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
async def crash_fleet(crash_stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(
        crash_stack,
        servers,
        SUITE,
        HOSTS,
        Resources(cpu=128, memory_mb=128 * 1024, disk_gb=4000),
        heartbeat_interval=1.0,
    ) as fleet:
        yield fleet


async def test_kill_9_of_a_scheduler_mid_run_loses_nothing_and_overcommits_nothing(
    crash_stack: Stack, crash_fleet: SimulatedFleet, servers: Servers
) -> None:
    rng = random.Random(9)
    async with (
        EventCounter(servers.amqp_url, "vm.assigned") as assigned,
        crash_stack.async_client(timeout=120) as api,
    ):
        vm_ids = await submit(api, [mixed_vm(rng, i, SUITE) for i in range(VMS)])
        wanted = set(vm_ids)
        # the crash lands mid-run: some VMs placed, many still queued
        await wait_running(servers, vm_ids, 100)
        crash_stack.services["scheduler-1"].kill()
        crash_stack.start_scheduler(1)
        await wait_settled(servers, vm_ids, timeout=240)
        report = await check(servers.asyncpg_dsn, vm_ids, crash_fleet)
    print(f"kill -9: {VMS} VMs -> {report.by_status}")
    assert report.problems == []
    assert report.by_status.get("running", 0) == VMS
    mine = {vm_id: ids for vm_id, ids in assigned.by_vm.items() if vm_id in wanted}
    assert all(len(set(ids)) == 1 for ids in mine.values()), "a VM announced under two message ids"


async def test_a_redis_flush_mid_run_loses_nothing_and_overcommits_nothing(
    crash_stack: Stack, crash_fleet: SimulatedFleet, servers: Servers
) -> None:
    rng = random.Random(10)
    async with crash_stack.async_client(timeout=120) as api:
        vm_ids = await submit(api, [mixed_vm(rng, i, SUITE) for i in range(VMS)])
        await wait_running(servers, vm_ids, 100)
        # Every key of this installation goes, as after FLUSHALL (the machine's Redis is shared with
        # other users, so the test removes this run's keys rather than everyone's).
        client = aioredis.Redis.from_url(servers.redis_url)
        try:
            keys = [key async for key in client.scan_iter(match=f"{servers.redis_key_prefix}:*", count=5000)]
            assert keys
            await client.delete(*keys)
        finally:
            await client.aclose()
        await wait_settled(servers, vm_ids, timeout=240)
        report = await check(servers.asyncpg_dsn, vm_ids, crash_fleet)
    print(f"flush: {VMS} VMs -> {report.by_status}")
    assert report.problems == []
    assert report.by_status.get("unschedulable", 0) == 0  # placements resumed after the flush
