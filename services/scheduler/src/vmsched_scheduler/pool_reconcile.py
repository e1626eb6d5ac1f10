"""The shared storage pools of the Redis snapshot from PostgreSQL, the truth: every reconcile writes
each pool's capacity and tags again (a Redis flush took them: without them a pool has no room), and
gives a pool whose allocation the snapshot lost PostgreSQL's (its committed volumes). A pool whose
allocation the snapshot still holds keeps it: the claims in flight are counted there and nowhere
else, as a host hash keeps its allocations once synced (lua/heartbeat.lua). Claims that reconciliation
restored get the shared pools their VMs' volumes are on, so that their release gives them back."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_domain.extra import extra_json
from vmsched_domain.lifecycle import HOLDS_CAPACITY, sql_in
from vmsched_redis.snapshot import Snapshot
from vmsched_redis.storage_pools import put_shared_pool, shared_pools_key

_POOLS = text(
    f"""
    SELECT s.name, s.capacity_gb, s.tags,
           (SELECT coalesce(sum(w.size_gb), 0) FROM vm_volumes w JOIN vms v ON v.id = w.vm_id
             WHERE w.shared AND w.pool = s.name AND v.status IN {sql_in(HOLDS_CAPACITY)}) AS allocated_gb
      FROM storage_pools s
    """
)


# Per committed VM with volumes: {pool: GB} on shared pools and on its host's local ones (its claim
# id is its own: a migration's target claim takes none of its shared pools, which stay where they are).
_VM_POOLS = text(
    f"""
    SELECT w.vm_id,
           coalesce(jsonb_object_agg(w.pool, w.size_gb) FILTER (WHERE w.shared), '{{}}'::jsonb) AS shared,
           coalesce(jsonb_object_agg(w.pool, w.size_gb) FILTER (WHERE NOT w.shared), '{{}}'::jsonb) AS local
      FROM vm_volumes w JOIN vms v ON v.id = w.vm_id
     WHERE v.status IN {sql_in(HOLDS_CAPACITY)}
     GROUP BY w.vm_id
    """
)


async def reconcile_pools(engine: AsyncEngine, snapshot: Snapshot) -> int:
    """Write every shared pool into the snapshot; how many had lost their allocation."""
    async with engine.connect() as connection:
        pools = (await connection.execute(_POOLS)).all()
        vms = (await connection.execute(_VM_POOLS)).all()
    if vms:
        await snapshot.restore_pool_claims({row.vm_id: (extra_json(row.shared), extra_json(row.local)) for row in vms})
    restored = 0
    key = shared_pools_key(snapshot.prefix)
    for pool in pools:
        await put_shared_pool(snapshot.redis, snapshot.prefix, pool.name, pool.capacity_gb, list(pool.tags or []))
        restored += int(await snapshot.redis.hsetnx(key, f"a:{pool.name}", str(pool.allocated_gb)))
    return restored
