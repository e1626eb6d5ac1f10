"""PostgreSQL's guard of the storage pool rule: the settlement's check that a round's placements keep
every pool within its capacity, whatever Redis said, and the record of what each VM took.

The settlement locks the shared pools' rows the round's VMs take (after the VMs', groups' and hosts':
the order every writer keeps; a host's lock covers its local pools), so two schedulers settling on
one shared pool queue on each other. Then one statement reads each pool as the host reaches it (the
host's heartbeat lists it; a shared pool's capacity and tags are its ``storage_pools`` row's) with
what is allocated on it (``vm_volumes`` of VMs that hold capacity), adds the round's takes in order
and checks ``vmsched_domain.storage.pool_fits`` (rendered by :func:`~vmsched_domain.storage.sql_pool_fits`)
and the tags. A placement any of whose pools refuses is refused (HOST_REFUSED).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from vmsched_domain.lifecycle import HOLDS_CAPACITY, sql_in
from vmsched_domain.storage import sql_pool_fits
from vmsched_scheduler.ports import Placement

LOCK_POOLS = text("SELECT name FROM storage_pools WHERE name = ANY(CAST(:names AS text[])) ORDER BY name FOR UPDATE")

_HOLDING = sql_in(HOLDS_CAPACITY)
# Per (placement, pool): whether the pool takes it, counted with the round's takes before it.
GUARD = text(
    f"""
    WITH asked AS (
        SELECT * FROM unnest(CAST(:ords AS int[]), CAST(:hosts AS text[]), CAST(:pools AS text[]),
                             CAST(:gbs AS bigint[]), CAST(:tags AS text[])) AS a(ord, host_id, pool, gb, tags)
    ), reached AS (
        SELECT a.ord, a.host_id, a.pool, a.gb, CAST(a.tags AS jsonb) AS tags, p.value AS listed,
               coalesce(p.value ->> 'kind' = 'shared', false) AS shared
          FROM asked a JOIN hosts h ON h.id = a.host_id
          LEFT JOIN LATERAL jsonb_array_elements(h.storage_pools) p ON p.value ->> 'name' = a.pool
    ), numbers AS (
        SELECT r.ord, r.host_id, r.pool, r.gb, r.tags, r.listed, r.shared,
               CASE WHEN r.shared THEN coalesce(s.capacity_gb, 0)
                    ELSE coalesce(CAST(r.listed ->> 'capacity_gb' AS bigint), 0) END AS capacity,
               CASE WHEN r.shared THEN coalesce(s.tags, '[]'::jsonb)
                    ELSE coalesce(r.listed -> 'tags', '[]'::jsonb) END AS pool_tags,
               CASE WHEN r.shared THEN
                   (SELECT coalesce(sum(w.size_gb), 0) FROM vm_volumes w JOIN vms v ON v.id = w.vm_id
                     WHERE w.shared AND w.pool = r.pool AND v.status IN {_HOLDING})
               ELSE
                   (SELECT coalesce(sum(w.size_gb), 0) FROM vm_volumes w JOIN vms v ON v.id = w.vm_id
                     WHERE NOT w.shared AND w.pool = r.pool AND v.hypervisor_id = r.host_id
                       AND v.status IN {_HOLDING})
               END AS allocated
          FROM reached r LEFT JOIN storage_pools s ON s.name = r.pool
    ), running AS (
        SELECT n.*, sum(n.gb) OVER (PARTITION BY CASE WHEN n.shared THEN n.pool ELSE n.host_id || '/' || n.pool END
                                    ORDER BY n.ord) AS total
          FROM numbers n
    )
    SELECT ord, bool_and(listed IS NOT NULL AND pool_tags @> tags AND {sql_pool_fits("total", "capacity", "allocated")})
               AS fits
      FROM running GROUP BY ord
    """
)

_FORGET = text("DELETE FROM vm_volumes WHERE vm_id = ANY(CAST(:ids AS uuid[]))")
# What each placed VM took, and each of its volumes' pool in its row.
_RECORD = text(
    """
    WITH taken AS (
        SELECT * FROM unnest(CAST(:vm_ids AS uuid[]), CAST(:pools AS text[]), CAST(:gbs AS bigint[]))
            AS t(vm_id, pool, gb)
    )
    INSERT INTO vm_volumes (vm_id, pool, shared, size_gb)
    SELECT t.vm_id, t.pool, coalesce(p.value ->> 'kind' = 'shared', false), t.gb
      FROM taken t JOIN vms v ON v.id = t.vm_id JOIN hosts h ON h.id = v.hypervisor_id
      LEFT JOIN LATERAL jsonb_array_elements(h.storage_pools) p ON p.value ->> 'name' = t.pool
    """
)
# Each volume of the VM's row gets its pool (the n-th volume the n-th pool of ``pools``).
_VOLUME_POOLS = text(
    """
    UPDATE vms v
       SET volumes = coalesce(
               (SELECT jsonb_agg(e.volume || jsonb_build_object('pool', p.name, 'shared', coalesce(
                                     (SELECT r.value ->> 'kind' = 'shared' FROM jsonb_array_elements(h.storage_pools) r
                                       WHERE r.value ->> 'name' = p.name LIMIT 1), false))
                                 ORDER BY e.at)
                  FROM jsonb_array_elements(v.volumes) WITH ORDINALITY AS e(volume, at)
                  CROSS JOIN LATERAL (SELECT CAST(i.pools AS jsonb) ->> CAST(e.at - 1 AS int) AS name) p),
               v.volumes)
      FROM unnest(CAST(:vm_ids AS uuid[]), CAST(:pools AS text[])) AS i(vm_id, pools), hosts h
     WHERE v.id = i.vm_id AND h.id = v.hypervisor_id
    """
)


def shared_pool_names(placements: Sequence[Placement]) -> list[str]:
    """Every pool the placements take, sorted: the shared ones among them are locked (a local one
    has no row; its host's lock covers it)."""
    return sorted({take.name for p in placements for take in p.storage.takes})


async def refused_by_pools(connection: AsyncConnection, placements: Sequence[Placement]) -> set[UUID]:
    """The placements a pool they take refuses (each counted with those before it in the round)."""
    taking = [(ord_, p) for ord_, p in enumerate(placements) if p.storage.takes]
    if not taking:
        return set()
    await connection.execute(LOCK_POOLS, {"names": shared_pool_names([p for _, p in taking])})
    rows = [(ord_, p.host_id, take) for ord_, p in taking for take in p.storage.takes]
    params = {
        "ords": [ord_ for ord_, _, _ in rows],
        "hosts": [host for _, host, _ in rows],
        "pools": [take.name for _, _, take in rows],
        "gbs": [take.gb for _, _, take in rows],
        "tags": [json.dumps(sorted(take.tags)) for _, _, take in rows],
    }
    fits = {row.ord: row.fits for row in await connection.execute(GUARD, params)}
    return {p.vm_id for ord_, p in taking if not fits.get(ord_, False)}


async def record_volumes(
    connection: AsyncConnection, placements: Sequence[Placement], placed: Collection[UUID]
) -> None:
    """What the placed VMs' volumes took of each pool (``vm_volumes``), and each volume's pool in its row."""
    taking = [p for p in placements if p.storage.takes and p.vm_id in placed]
    if not taking:
        return
    await connection.execute(_FORGET, {"ids": [p.vm_id for p in taking]})
    rows = [(p.vm_id, take) for p in taking for take in p.storage.takes]
    await connection.execute(
        _RECORD,
        {"vm_ids": [vm_id for vm_id, _ in rows], "pools": [t.name for _, t in rows], "gbs": [t.gb for _, t in rows]},
    )
    pools = [json.dumps(list(p.storage.pools)) for p in taking]
    await connection.execute(_VOLUME_POOLS, {"vm_ids": [p.vm_id for p in taking], "pools": pools})
