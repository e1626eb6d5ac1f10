"""A reconcile reads PostgreSQL's view first and writes Redis host by host afterwards; claims given
back in between (a VM deleted, a reservation expired, preemption's swap, a migration's move) must
not come back from that stale view. On the real servers, with the releases put deterministically
between the view and the write."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import delete_keys, online_host
from tests.servers import Servers
from vmsched_contract.messages import ZERO, Resources
from vmsched_domain.claims import target_claim_id
from vmsched_redis.claims import Claim, CommittedVm
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.reconcile import reconcile

HOST = Resources(cpu=16, memory_mb=65536, disk_gb=1000)
VM = Resources(cpu=2, memory_mb=2048, disk_gb=20, extra={"fpga": 1})


@pytest.fixture
async def redis(servers: Servers) -> AsyncIterator[Redis]:
    client = Redis.from_url(servers.redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def snapshot(servers: Servers, redis: Redis) -> AsyncIterator[Snapshot]:
    prefix = f"{servers.redis_key_prefix}-stale-{uuid.uuid4().hex[:6]}"
    try:
        yield Snapshot(redis, prefix)
    finally:
        await delete_keys(redis, prefix)


async def allocated(snapshot: Snapshot, host_id: str) -> tuple[Resources, int]:
    host = (await snapshot.read_hosts([host_id]))[host_id]
    assert host is not None
    return host.allocated, host.vm_count


async def fleet(snapshot: Snapshot, *host_ids: str) -> None:
    capacity = HOST.model_copy(update={"extra": {"fpga": 4}})
    await snapshot.record_heartbeats([online_host(h, capacity) for h in host_ids], bump_interval=5.0)


async def test_a_claim_released_after_the_view_was_read_is_neither_restored_nor_counted(snapshot: Snapshot) -> None:
    await fleet(snapshot, "hv-1")
    kept, deleted = uuid.uuid4(), uuid.uuid4()
    both = [CommittedVm(kept, VM), CommittedVm(deleted, VM)]
    now = time.time()
    assert all(
        r.holds for r in (await snapshot.claim_many([Claim(vm, "hv-1", VM) for vm in (kept, deleted)], now)).results
    )

    view_at = await snapshot.server_time()  # PostgreSQL's view read here: both VMs committed
    assert await snapshot.release(deleted) == "hv-1"  # deleted: PostgreSQL, then Redis, after the view
    two = VM.plus(VM)
    restored, dropped, in_flight, stale = await snapshot.reconcile_host("hv-1", two, 2, both, now, 30.0, view_at)

    assert (restored, dropped, in_flight, stale) == (0, 0, 0, 1)
    assert await snapshot.claim_of(deleted) is None
    assert await allocated(snapshot, "hv-1") == (VM, 1)
    # A view read after the release is the truth again: were the VM committed there, it is restored.
    later = await snapshot.server_time()
    assert (await snapshot.reconcile_host("hv-1", two, 2, both, now, 30.0, later))[0] == 1
    assert await allocated(snapshot, "hv-1") == (two, 2)


async def test_a_vm_released_and_claimed_again_after_the_view_counts_once_where_it_is_now(snapshot: Snapshot) -> None:
    await fleet(snapshot, "hv-1", "hv-2")
    vm = uuid.uuid4()
    now = time.time()
    assert (await snapshot.claim(vm, "hv-1", VM, now)).holds
    view_at = await snapshot.server_time()  # the view: the VM on hv-1
    await snapshot.release(vm)  # its restart: released, then placed again on hv-2
    assert (await snapshot.claim(vm, "hv-2", VM, time.time())).holds

    await snapshot.reconcile_host("hv-1", VM, 1, [CommittedVm(vm, VM)], now, 30.0, view_at)
    await snapshot.reconcile_host("hv-2", ZERO, 0, [], now, 30.0, view_at)

    assert await snapshot.claim_of(vm) == "hv-2"  # not moved back to hv-1
    assert await allocated(snapshot, "hv-1") == (ZERO, 0)
    assert await allocated(snapshot, "hv-2") == (VM, 1)  # in flight until a view that has it


async def test_a_move_after_the_view_leaves_the_vm_on_its_target_once(snapshot: Snapshot) -> None:
    await fleet(snapshot, "hv-s", "hv-t")
    vm = uuid.uuid4()
    long_ago = time.time() - 3600  # the migration began long before: its target claim is old
    claims = [Claim(vm, "hv-s", VM), Claim(vm, "hv-t", VM, target=True)]
    assert all(r.holds for r in (await snapshot.claim_many(claims, long_ago)).results)
    view_at = await snapshot.server_time()  # the view: the VM on the source, its target share on the target
    assert await snapshot.move_claim(vm) == ("hv-s", "hv-t")

    now = time.time()
    await snapshot.reconcile_host("hv-s", VM, 1, [CommittedVm(vm, VM)], now, 30.0, view_at)
    await snapshot.reconcile_host("hv-t", VM, 1, [CommittedVm(target_claim_id(vm), VM)], now, 30.0, view_at)

    assert (await snapshot.claim_of(vm), await snapshot.claim_of(target_claim_id(vm))) == ("hv-t", None)
    assert await allocated(snapshot, "hv-s") == (ZERO, 0)
    assert await allocated(snapshot, "hv-t") == (VM, 1)


async def test_a_group_member_released_after_the_view_is_not_counted(snapshot: Snapshot) -> None:
    group = uuid.uuid4()
    kept, deleted = uuid.uuid4(), uuid.uuid4()
    view_at = await snapshot.server_time()
    await snapshot.redis.zadd(snapshot.released_key, {str(deleted): view_at + 1})  # as the release does
    members = [(kept, "z1"), (deleted, "z2")]
    assert await snapshot.reconcile_group(group, members, time.time(), 30.0, view_at) == (1, 0, 0)
    assert (await snapshot.group_members([group]))[group] == {"z1": 1}


class ReleasingBetweenViewAndWrite(Snapshot):
    """Releases ``victims`` just before the reconcile writes its first host: what a scheduler or the
    gateway may do at any moment while a reconcile runs."""

    def __init__(self, redis: Redis, prefix: str, victims: Sequence[uuid.UUID]) -> None:
        super().__init__(redis, prefix)
        self.victims = list(victims)

    async def reconcile_host(self, *args: Any, **kwargs: Any) -> tuple[int, int, int, int]:
        if self.victims:
            await self.release_many(self.victims)
            self.victims = []
        return await super().reconcile_host(*args, **kwargs)


async def test_reconcile_does_not_bring_back_a_vm_deleted_while_it_ran(
    private_engine: AsyncEngine, snapshot: Snapshot, redis: Redis
) -> None:
    kept, deleted = uuid.uuid4(), uuid.uuid4()
    async with private_engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, alloc_cpu, alloc_memory_mb, alloc_disk_gb, "
                "vm_count) VALUES ('hv-1', 'online', 16, 65536, 1000, 4, 4096, 40, 2)"
            )
        )
        for vm_id in (kept, deleted):
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb) "
                    "VALUES (:id, 's', 'running', 'hv-1', 2, 2048, 20)"
                ),
                {"id": vm_id},
            )
    await fleet(snapshot, "hv-1")
    await reconcile(private_engine, snapshot)  # both claims restored: the snapshot as it runs
    plain = VM.model_copy(update={"extra": {}})
    assert await allocated(snapshot, "hv-1") == (plain.plus(plain), 2)

    # The VM is deleted while the next reconcile runs: its view (read first) still has it.
    racing = ReleasingBetweenViewAndWrite(redis, snapshot.prefix, [deleted])
    report = await reconcile(private_engine, racing)

    assert (report.restored_claims, report.stale_claims) == (0, 1)
    assert await snapshot.claim_of(deleted) is None
    assert await allocated(snapshot, "hv-1") == (plain, 1)
