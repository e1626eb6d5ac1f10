"""The shared storage pools in PostgreSQL: the operator's capacity and tags, what is allocated on
each (its ``vm_volumes`` of VMs that hold capacity) and how many hosts reach it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.storage import SharedPoolBody, SharedPoolView
from vmsched_domain.lifecycle import HOLDS_CAPACITY, sql_in

_HOLDING = sql_in(HOLDS_CAPACITY)
_VIEW = f"""
    SELECT s.name, s.capacity_gb, s.tags, s.updated_at,
           coalesce(u.allocated_gb, 0) AS allocated_gb, coalesce(u.vms, 0) AS vms,
           (SELECT count(*) FROM hosts h
             WHERE h.storage_pools @> jsonb_build_array(jsonb_build_object('name', s.name, 'kind', 'shared')))
               AS hosts
      FROM storage_pools s
      LEFT JOIN LATERAL (
          SELECT sum(w.size_gb) AS allocated_gb, count(*) AS vms FROM vm_volumes w JOIN vms v ON v.id = w.vm_id
           WHERE w.shared AND w.pool = s.name AND v.status IN {_HOLDING}
      ) u ON true
"""
_LIST = text(f"{_VIEW} ORDER BY s.name")
_ONE = text(f"{_VIEW} WHERE s.name = :name")
_PUT = text(
    """
    INSERT INTO storage_pools (name, capacity_gb, tags) VALUES (:name, :capacity_gb, CAST(:tags AS jsonb))
    ON CONFLICT (name) DO UPDATE SET capacity_gb = excluded.capacity_gb, tags = excluded.tags, updated_at = now()
    """
)
_LOCK = text("SELECT name FROM storage_pools WHERE name = :name FOR UPDATE")
# A pool is in use while a VM that is not deleted has volumes on it (a failed VM may be retried).
_USERS = text(
    """
    SELECT w.vm_id FROM vm_volumes w JOIN vms v ON v.id = w.vm_id
     WHERE w.shared AND w.pool = :name AND v.status <> 'deleted'
     ORDER BY w.vm_id LIMIT 20
    """
)
_DELETE = text("DELETE FROM storage_pools WHERE name = :name")


def _view(row: Any) -> SharedPoolView:
    return SharedPoolView(
        name=row.name,
        capacity_gb=row.capacity_gb,
        tags=list(row.tags or []),
        allocated_gb=int(row.allocated_gb),
        vms=int(row.vms),
        hosts=int(row.hosts),
        updated_at=row.updated_at,
    )


class StoragePoolStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def list(self) -> list[SharedPoolView]:
        async with self.engine.connect() as connection:
            return [_view(row) for row in await connection.execute(_LIST)]

    async def get(self, name: str) -> SharedPoolView | None:
        async with self.engine.connect() as connection:
            row = (await connection.execute(_ONE, {"name": name})).first()
        return None if row is None else _view(row)

    async def put(self, name: str, body: SharedPoolBody) -> SharedPoolView:
        """Create the pool or replace its capacity and tags (a capacity below what is allocated keeps
        its volumes and takes no new one until it has room again)."""
        tags = json.dumps(sorted(set(body.tags)))
        async with self.engine.begin() as connection:
            await connection.execute(_PUT, {"name": name, "capacity_gb": body.capacity_gb, "tags": tags})
            row = (await connection.execute(_ONE, {"name": name})).one()
        return _view(row)

    async def delete(self, name: str) -> tuple[bool, Sequence[UUID]]:
        """(whether the pool existed, the VMs whose volumes keep it: it stays while there is one)."""
        async with self.engine.begin() as connection:
            if (await connection.execute(_LOCK, {"name": name})).first() is None:
                return False, []
            users = [row.vm_id for row in await connection.execute(_USERS, {"name": name})]
            if not users:
                await connection.execute(_DELETE, {"name": name})
        return True, users
