"""A migrating VM in the Redis snapshot, on the real servers: its two claims, their move when the
migration is done, and reconciliation that understands a VM holding capacity on two hosts (and
repairs a move a crash cut short)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import delete_keys, online_host
from tests.servers import Servers
from vmsched_contract.messages import ZERO, Resources
from vmsched_domain.claims import target_claim_id
from vmsched_redis.claims import Claim
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.reconcile import reconcile

HOST = Resources(cpu=16, memory_mb=65536, disk_gb=1000)
VM = Resources(cpu=2, memory_mb=2048, disk_gb=20)


@pytest.fixture
async def snapshot(servers: Servers) -> AsyncIterator[Snapshot]:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    prefix = f"{servers.redis_key_prefix}-moving-{uuid.uuid4().hex[:6]}"
    try:
        yield Snapshot(redis, prefix)
    finally:
        await delete_keys(redis, prefix)
        await redis.aclose()


async def _allocated(snapshot: Snapshot, *host_ids: str) -> list[Resources]:
    hosts = await snapshot.read_hosts(list(host_ids))
    found = []
    for host_id in host_ids:
        host = hosts[host_id]
        assert host is not None
        found.append(host.allocated)
    return found


async def _rows(
    engine: AsyncEngine, *, status: str, host: str, target: str | None, group: uuid.UUID | None
) -> uuid.UUID:
    vm_id = uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, hypervisor_id, migration_target, task, migrations, server_group, "
                "cpu, memory_mb, disk_gb) VALUES (:id, 'm', :status, :host, :target, :task, 1, :group, 2, 2048, 20)"
            ),
            {
                "id": vm_id,
                "status": status,
                "host": host,
                "target": target,
                "task": "preparing" if target else None,
                "group": group,
            },
        )
    return vm_id


async def _hosts(engine: AsyncEngine, snapshot: Snapshot, *host_ids: str, zone: dict[str, str]) -> None:
    async with engine.begin() as connection:
        for host_id in host_ids:
            await connection.execute(
                text(
                    "INSERT INTO hosts (id, status, labels, cpu, memory_mb, disk_gb) "
                    "VALUES (:id, 'online', CAST(:labels AS jsonb), 16, 65536, 1000)"
                ),
                {"id": host_id, "labels": f'{{"zone": "{zone[host_id]}"}}'},
            )
    await snapshot.record_heartbeats(
        [online_host(host_id, HOST, labels={"zone": zone[host_id]}) for host_id in host_ids], bump_interval=5.0
    )


async def test_the_move_gives_the_source_back_and_makes_the_target_claim_the_vm_s(snapshot: Snapshot) -> None:
    await snapshot.record_heartbeats([online_host("hv-s", HOST), online_host("hv-t", HOST)], bump_interval=5.0)
    vm_id = uuid.uuid4()
    claimed = await snapshot.claim_many([Claim(vm_id, "hv-s", VM), Claim(vm_id, "hv-t", VM, target=True)], time.time())
    assert [r.outcome for r in claimed.results] == ["claimed", "claimed"]
    assert await _allocated(snapshot, "hv-s", "hv-t") == [VM, VM]  # in flight: both hold it
    assert await snapshot.move_claim(vm_id) == ("hv-s", "hv-t")
    assert await _allocated(snapshot, "hv-s", "hv-t") == [ZERO, VM]
    assert (await snapshot.claim_of(vm_id), await snapshot.claim_of(target_claim_id(vm_id))) == ("hv-t", None)
    assert await snapshot.move_claim(vm_id) == (None, None)  # once only
    assert await _allocated(snapshot, "hv-s", "hv-t") == [ZERO, VM]
    assert await snapshot.release(vm_id) == "hv-t"  # the moved claim releases from where it is now
    assert await _allocated(snapshot, "hv-s", "hv-t") == [ZERO, ZERO]


async def test_reconciliation_restores_a_migrating_vm_on_both_hosts_and_counts_its_group_on_both(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    zone = {"hv-a": "z1", "hv-b": "z2"}
    await _hosts(private_engine, snapshot, "hv-a", "hv-b", zone=zone)
    group = uuid.uuid4()
    async with private_engine.begin() as connection:
        await connection.execute(
            text("INSERT INTO server_groups (id, name, policy, topology_key) VALUES (:id, 'g', 'spread', 'zone')"),
            {"id": group},
        )
    vm_id = await _rows(private_engine, status="migrating", host="hv-a", target="hv-b", group=group)
    # A flushed snapshot (no claims), and host rows that do not count the VM yet: both rebuilt from it.
    report = await reconcile(private_engine, snapshot)
    assert (report.restored_claims, report.repaired_hosts) == (2, 2)
    assert await _allocated(snapshot, "hv-a", "hv-b") == [VM, VM]
    assert (await snapshot.claim_of(vm_id), await snapshot.claim_of(target_claim_id(vm_id))) == ("hv-a", "hv-b")
    assert (await snapshot.group_members([group]))[group] == {"z1": 1, "z2": 1}
    async with private_engine.connect() as connection:
        rows = (await connection.execute(text("SELECT id, alloc_cpu, vm_count FROM hosts ORDER BY id"))).all()
    assert [tuple(row) for row in rows] == [("hv-a", 2, 1), ("hv-b", 2, 1)]
    # Once the migration is done in PostgreSQL, a move of the claims a crash cut short is repaired.
    async with private_engine.begin() as connection:
        await connection.execute(
            text(
                "UPDATE vms SET status = 'running', hypervisor_id = 'hv-b', migration_target = NULL, task = NULL "
                "WHERE id = :id"
            ),
            {"id": vm_id},
        )
        await connection.execute(
            text(
                "UPDATE hosts SET alloc_cpu = 0, alloc_memory_mb = 0, alloc_disk_gb = 0, vm_count = 0 WHERE id = 'hv-a'"
            )
        )
    await reconcile(private_engine, snapshot, grace=0.0)
    assert await _allocated(snapshot, "hv-a", "hv-b") == [ZERO, VM]
    assert (await snapshot.claim_of(vm_id), await snapshot.claim_of(target_claim_id(vm_id))) == ("hv-b", None)
    assert (await snapshot.group_members([group]))[group] == {"z2": 1}
