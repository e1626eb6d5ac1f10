"""The scheduler's batched path (batch.py) on the real Redis and PostgreSQL, in this process: a batch
is placed with one claim pipeline and one commit, and a claim the snapshot was wrong about sends its
VM down the one-VM path, which records the refused claim."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import delete_keys, insert_vm, online_host
from tests.servers import Servers
from vmsched_common.messages import AgentHeartbeat, Resources, VmAssigned, VmCreate, VmUnschedulable
from vmsched_common.settings import Settings, Strategy
from vmsched_common.snapshot import Snapshot
from vmsched_gateway.store import GatewayStore
from vmsched_scheduler.batch import BatchPlacer
from vmsched_scheduler.fleet_cache import FleetCache
from vmsched_scheduler.service import Scheduler
from vmsched_scheduler.store import SchedulerStore

pytestmark = pytest.mark.integration

BIG = Resources(cpu=32, memory_mb=65536, disk_gb=1000)
SMALL = Resources(cpu=8, memory_mb=16384, disk_gb=1000)
VM = Resources(cpu=2, memory_mb=2048, disk_gb=10)


@dataclass
class Placing:
    placer: BatchPlacer
    snapshot: Snapshot
    engine: AsyncEngine
    assigned: list[VmAssigned] = field(default_factory=list)
    unschedulable: list[VmUnschedulable] = field(default_factory=list)


@pytest.fixture
async def placing(private_engine: AsyncEngine, servers: Servers, settings: Settings) -> AsyncIterator[Placing]:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    snapshot = Snapshot(redis, f"{servers.redis_key_prefix}-batch-{uuid.uuid4().hex[:6]}")
    hosts = {"hv-big": BIG, "hv-small": SMALL}
    rows = await GatewayStore(private_engine, max_attempts=3).upsert_hosts(
        [AgentHeartbeat(agent_id=host, capacity=capacity) for host, capacity in hosts.items()]
    )
    await snapshot.record_heartbeats(
        [online_host(row.host_id, hosts[row.host_id], allocated=row.allocated, vm_count=row.vm_count) for row in rows],
        bump_interval=60.0,
    )
    # A cache that refreshes at most once a minute: it can be made to believe a host has room.
    fleet = FleetCache(snapshot, full_refresh_every=3600.0, min_refresh_interval=60.0)
    await fleet.refresh(force_full=True)
    placing = Placing(placer=None, snapshot=snapshot, engine=private_engine)  # type: ignore[arg-type]

    async def publish_assigned(event: VmAssigned) -> None:
        placing.assigned.append(event)

    async def publish_unschedulable(event: VmUnschedulable) -> None:
        placing.unschedulable.append(event)

    scheduler = Scheduler(
        settings=settings,
        snapshot=snapshot,
        fleet=fleet,
        store=SchedulerStore(private_engine, default_strategy=Strategy.LEAST_LOADED),
        publish_assigned=publish_assigned,
        publish_unschedulable=publish_unschedulable,
        rng=random.Random(1),
    )
    placing.placer = BatchPlacer(scheduler, max_batch=64)
    try:
        yield placing
    finally:
        await placing.placer.drain()
        await delete_keys(redis, snapshot.prefix)
        await redis.aclose()


async def pending_vm(engine: AsyncEngine, name: str) -> VmCreate:
    vm_id = await insert_vm(engine, status="pending", name=name, resources=VM)
    return VmCreate(vm_id=vm_id, name=name, resources=VM)


async def placement_of(engine: AsyncEngine, vm_id: uuid.UUID) -> tuple[str, str, int]:
    async with engine.connect() as connection:
        row = (
            await connection.execute(
                text(
                    "SELECT status, hypervisor_id, (placement->>'claim_conflicts')::int AS conflicts "
                    "FROM vms WHERE id = :id"
                ),
                {"id": vm_id},
            )
        ).one()
    return row.status, row.hypervisor_id, row.conflicts


async def test_a_batch_is_placed_together_and_each_vm_once(placing: Placing) -> None:
    messages = [await pending_vm(placing.engine, f"b{n}") for n in range(10)]

    await asyncio.wait_for(asyncio.gather(*(placing.placer.place(m) for m in messages)), timeout=30)

    placed = [await placement_of(placing.engine, m.vm_id) for m in messages]
    assert {status for status, _, _ in placed} == {"scheduled"}
    assert sorted(event.vm_id for event in placing.assigned) == sorted(m.vm_id for m in messages)
    # Each decision saw the ones before it in the batch: least_loaded spread them over both hosts.
    assert {host for _, host, _ in placed} == {"hv-big", "hv-small"}
    async with placing.engine.connect() as connection:
        allocated = dict((await connection.execute(text("SELECT id, alloc_cpu FROM hosts"))).all())
    by_host = {host: sum(VM.cpu for _, h, _ in placed if h == host) for host in ("hv-big", "hv-small")}
    assert allocated == by_host


async def test_a_claim_the_snapshot_was_wrong_about_goes_one_by_one_and_is_recorded(placing: Placing) -> None:
    # Behind the cache's back, another scheduler fills the big host in Redis.
    filler = await placing.snapshot.claim(uuid.uuid4(), "hv-big", BIG, time.time())
    assert filler.outcome == "claimed"
    message = await pending_vm(placing.engine, "late")

    await asyncio.wait_for(placing.placer.place(message), timeout=30)

    status, host, conflicts = await placement_of(placing.engine, message.vm_id)
    assert (status, host) == ("scheduled", "hv-small")
    assert conflicts == 1  # the refused claim on hv-big, made in the batch
    assert [event.hypervisor_id for event in placing.assigned] == ["hv-small"]
