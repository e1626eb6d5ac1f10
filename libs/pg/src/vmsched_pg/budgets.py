"""Disruption budgets read from PostgreSQL (:mod:`vmsched_domain.disruption`): each server group's
``max_unavailable`` and how many of its members are unavailable now. A writer about to disrupt members
locks their groups' rows first (after the VMs', before the hosts': the order every writer keeps), so
that two of them cannot each take the last unit of a budget. ``FOR NO KEY UPDATE``: a VM joining the
group meanwhile (its foreign key check takes ``KEY SHARE``) does not wait for it."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from vmsched_domain.disruption import UNAVAILABLE_SQL, Budget

_BUDGETS = f"""
    SELECT g.id, g.max_unavailable,
           (SELECT count(*) FROM vms v WHERE v.server_group = g.id AND v.status IN {UNAVAILABLE_SQL}) AS unavailable
      FROM server_groups g
     WHERE g.id = ANY(CAST(:ids AS uuid[])) AND g.max_unavailable IS NOT NULL
     ORDER BY g.id
"""
_READ = text(_BUDGETS)
_LOCK = text("SELECT id FROM server_groups WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR NO KEY UPDATE")


async def budgets(connection: AsyncConnection, group_ids: Sequence[UUID], *, lock: bool = False) -> dict[UUID, Budget]:
    """The budgets of the groups among ``group_ids`` that have one; ``lock``: their rows locked first
    (held until the caller's transaction ends)."""
    ids = sorted(set(group_ids))
    if not ids:
        return {}
    if lock:
        await connection.execute(_LOCK, {"ids": ids})
    return {
        row.id: Budget(row.id, int(row.max_unavailable), int(row.unavailable))
        for row in await connection.execute(_READ, {"ids": ids})
    }
