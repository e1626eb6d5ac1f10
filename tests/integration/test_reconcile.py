"""Reconciliation rebuilds Redis from PostgreSQL, the truth, on the real servers.

It runs against a database and key prefix of its own, so no running stack reconciles the same rows
at the same moment and the report's counts are this test's alone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import delete_keys, online_host
from tests.servers import Servers
from vmsched_contract.messages import Resources
from vmsched_contract.storage import PoolKind, StoragePool
from vmsched_domain.storage import PoolTake
from vmsched_redis.claims import Claim
from vmsched_redis.snapshot import Snapshot
from vmsched_redis.storage_pools import put_shared_pool
from vmsched_scheduler.reconcile import reconcile


@pytest.fixture
async def snapshot(servers: Servers) -> AsyncIterator[Snapshot]:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    prefix = f"{servers.redis_key_prefix}-reconcile-{uuid.uuid4().hex[:6]}"
    try:
        yield Snapshot(redis, prefix)
    finally:
        await delete_keys(redis, prefix)
        await redis.aclose()


async def _heartbeat(snapshot: Snapshot, host_id: str) -> None:
    await snapshot.record_heartbeats(
        [online_host(host_id, Resources(cpu=16, memory_mb=65536, disk_gb=1000, gpu=0))],
        bump_interval=5.0,
    )


async def test_a_flushed_snapshot_and_a_drifted_host_row_are_rebuilt_from_the_vms(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    vm_a, vm_b = uuid.uuid4(), uuid.uuid4()
    async with private_engine.begin() as connection:
        # alloc_* deliberately wrong: the VMs, not the recorded sums, are the truth.
        await connection.execute(
            text(
                "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, alloc_cpu, vm_count) "
                "VALUES ('hv-r1', 'online', 16, 65536, 1000, 99, 7)"
            )
        )
        for vm_id, status in ((vm_a, "scheduled"), (vm_b, "running")):
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb) "
                    "VALUES (:id, 'r', :status, 'hv-r1', 2, 2048, 20)"
                ),
                {"id": vm_id, "status": status},
            )
    # The host is known to Redis (its agent heartbeats) but its claims are gone, as after a flush.
    await _heartbeat(snapshot, "hv-r1")

    report = await reconcile(private_engine, snapshot)

    assert (report.hosts, report.restored_claims, report.repaired_hosts) == (1, 2, 1)
    assert {await snapshot.claim_of(vm_a), await snapshot.claim_of(vm_b)} == {"hv-r1"}
    host = (await snapshot.read_hosts(["hv-r1"]))["hv-r1"]
    assert host is not None
    assert (host.allocated.cpu, host.allocated.memory_mb, host.allocated.disk_gb, host.vm_count) == (4, 4096, 40, 2)
    async with private_engine.connect() as connection:
        row = (await connection.execute(text("SELECT alloc_cpu, vm_count FROM hosts WHERE id = 'hv-r1'"))).one()
    assert tuple(row) == (4, 2)

    # A second pass finds nothing to do, and says nothing to the schedulers: a host it leaves as it
    # was is not in the change feed (each scheduler would read it again, every host every pass).
    seq = await snapshot.current_seq()
    again = await reconcile(private_engine, snapshot)
    assert (again.restored_claims, again.dropped_claims, again.repaired_hosts) == (0, 0, 0)
    assert await snapshot.changed_since(seq) == (seq, {})


async def test_a_stale_claim_of_a_vm_postgresql_does_not_count_is_dropped(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    async with private_engine.begin() as connection:
        await connection.execute(
            text("INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb) VALUES ('hv-r2', 'online', 16, 65536, 1000)")
        )
    await _heartbeat(snapshot, "hv-r2")
    orphan, fresh = uuid.uuid4(), uuid.uuid4()
    resources = Resources(cpu=1, memory_mb=512, disk_gb=5)
    assert (await snapshot.claim(orphan, "hv-r2", resources, now=time.time() - 120)).holds
    assert (await snapshot.claim(fresh, "hv-r2", resources, now=time.time())).holds

    report = await reconcile(private_engine, snapshot, grace=30.0)

    # The old claim was a scheduler that died before committing; the young one may still commit.
    assert (report.dropped_claims, report.in_flight_claims) == (1, 1)
    assert await snapshot.claim_of(orphan) is None
    assert await snapshot.claim_of(fresh) == "hv-r2"
    host = (await snapshot.read_hosts(["hv-r2"]))["hv-r2"]
    assert host is not None
    assert (host.allocated.cpu, host.vm_count) == (1, 1)


async def test_a_flushed_snapshot_gets_the_room_reservations_hold_back_and_released_slots_go(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    reservation, held, used, released, vm = (uuid.uuid4() for _ in range(5))
    async with private_engine.begin() as connection:
        # Recorded allocations: a running VM of 2 vCPUs and one held slot of 3.
        await connection.execute(
            text(
                "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, alloc_cpu, alloc_memory_mb, alloc_disk_gb,"
                " vm_count) VALUES ('hv-r3', 'online', 16, 65536, 1000, 5, 2048, 20, 2)"
            )
        )
        await connection.execute(
            text(
                "INSERT INTO reservations (id, project, status, cpu, memory_mb, disk_gb, count)"
                " VALUES (:id, 'default', 'held', 3, 1024, 10, 3)"
            ),
            {"id": reservation},
        )
        for slot, status in ((held, "held"), (used, "used"), (released, "released")):
            await connection.execute(
                text(
                    "INSERT INTO reservation_slots (id, reservation_id, hypervisor_id, status, cpu, memory_mb, disk_gb)"
                    " VALUES (:id, :reservation, 'hv-r3', :status, 3, 1024, 10)"
                ),
                {"id": slot, "reservation": reservation, "status": status},
            )
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb, reservation)"
                " VALUES (:id, 'on-slot', 'running', 'hv-r3', 2, 1024, 10, :reservation)"
            ),
            {"id": vm, "reservation": reservation},
        )
    # As after a flush: the host is back (its agent heartbeats), no claim is; and a released slot's
    # claim is left over from before (old enough to be dropped).
    await _heartbeat(snapshot, "hv-r3")
    assert (await snapshot.claim(released, "hv-r3", Resources(cpu=3, memory_mb=1024, disk_gb=10), now=0.0)).holds

    report = await reconcile(private_engine, snapshot)

    assert (report.restored_claims, report.dropped_claims, report.repaired_hosts) == (2, 1, 0)
    assert await snapshot.claim_of(held) == "hv-r3"  # the held room, claimed by the slot's id
    assert await snapshot.claim_of(vm) == "hv-r3"
    assert await snapshot.claim_of(used) is None
    assert await snapshot.claim_of(released) is None
    host = (await snapshot.read_hosts(["hv-r3"]))["hv-r3"]
    assert host is not None
    assert (host.allocated.cpu, host.allocated.memory_mb, host.vm_count) == (5, 2048, 2)


async def test_a_dropped_claim_gives_its_storage_pools_back(private_engine: AsyncEngine, snapshot: Snapshot) -> None:
    pool = f"nfs-{uuid.uuid4().hex[:6]}"
    async with private_engine.begin() as connection:
        await connection.execute(
            text("INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb) VALUES ('hv-r5', 'online', 16, 65536, 1000)")
        )
        await connection.execute(text("INSERT INTO storage_pools (name, capacity_gb) VALUES (:n, 100)"), {"n": pool})
    write = replace(
        online_host("hv-r5", Resources(cpu=16, memory_mb=65536, disk_gb=1000)),
        storage_pools=[
            StoragePool(name="local", kind=PoolKind.LOCAL, capacity_gb=100),
            StoragePool(name=pool, kind=PoolKind.SHARED),
        ],
    )
    await snapshot.record_heartbeats([write], bump_interval=5.0)
    await put_shared_pool(snapshot.redis, snapshot.prefix, pool, 100, [])
    orphan = uuid.uuid4()
    takes = (PoolTake("local", 10), PoolTake(pool, 20))
    claim = Claim(orphan, "hv-r5", Resources(cpu=1, memory_mb=512, disk_gb=5), pools=takes)
    (claimed,) = (await snapshot.claim_many([claim], now=time.time() - 120)).results
    assert claimed.holds
    assert (await snapshot.shared_pools())[pool].allocated_gb == 20

    report = await reconcile(private_engine, snapshot, grace=30.0)

    assert report.dropped_claims == 1
    host = (await snapshot.read_hosts(["hv-r5"]))["hv-r5"]
    assert host is not None
    assert [(p.name, p.allocated_gb) for p in host.storage_pools] == [("local", 0), (pool, 0)]
    assert (await snapshot.shared_pools())[pool].allocated_gb == 0
