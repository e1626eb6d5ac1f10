"""The waiting VMs in PostgreSQL, the truth: read them, wake them, end those that waited too long.

Every change is a lifecycle transition out of ``waiting`` (:mod:`vmsched_domain.lifecycle`), guarded
by the status (and, for a wake, the attempt) under the row lock, with the rows locked in id order
as every writer locks them: a VM deleted, expired or woken by another waker meanwhile is left alone,
so a VM deleted while waiting is never placed, and a VM is woken once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Unplaced, UnschedulableReason
from vmsched_contract.status import VmStatus
from vmsched_domain.lifecycle import Event, transition
from vmsched_domain.records import VmRecord
from vmsched_pg.engine import retry_on_dead_connection
from vmsched_pg.rows import VM_COLUMNS, VM_FIELDS, columns, vm_from_row

WAKE = transition(Event.ROOM_APPEARED, VmStatus.WAITING)
EXPIRE = transition(Event.WAIT_EXPIRED, VmStatus.WAITING)
WAITING = WAKE.source.value

_ALL_WAITING = text(f"SELECT {VM_COLUMNS} FROM vms WHERE status = '{WAITING}' ORDER BY created_at, id")
# What entered "waiting" since a moment (the index ix_vms_waiting_updated): ids and attempts first,
# the whole rows only of those the waker does not know yet.
_ENTERED_SINCE = text(
    f"SELECT id, attempt, updated_at FROM vms WHERE status = '{WAITING}' AND updated_at > :since ORDER BY updated_at"
)
_ROWS = text(f"SELECT {VM_COLUMNS} FROM vms WHERE id = ANY(CAST(:ids AS uuid[])) AND status = '{WAITING}'")
_NOW = text("SELECT now()")

_WAKE = text(
    f"""
    WITH target AS (
        SELECT id FROM vms WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE
    ), wanted AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:attempts AS int[])) AS w(id, attempt)
    )
    UPDATE vms v
       SET status = '{WAKE.target.value}', attempt = v.attempt + 1, published_at = NULL, updated_at = now(),
           status_reason = 'capacity appeared: deciding again (it waited: ' || coalesce(v.status_reason, '') || ')'
      FROM target, wanted
     WHERE v.id = target.id AND v.id = wanted.id AND v.status = '{WAITING}' AND v.attempt = wanted.attempt
    RETURNING {columns(VM_FIELDS, "v")}
    """
)
# SKIP LOCKED: a VM another writer holds (being deleted, woken) is ended at the next sweep if still due.
_EXPIRE = text(
    f"""
    WITH target AS (
        SELECT id FROM vms WHERE status = '{WAITING}' AND wait_until <= now()
         ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED
    )
    UPDATE vms v
       SET status = '{EXPIRE.target.value}', updated_at = now(),
           status_reason = coalesce(v.status_reason, '') || '; waited ' || v.wait_s || 's for room'
      FROM target
     WHERE v.id = target.id AND v.status = '{WAITING}'
    RETURNING v.id, v.attempt, v.placement, v.project
    """
)


@dataclass(frozen=True, slots=True)
class Entered:
    vm_id: UUID
    attempt: int
    at: datetime


class WaitingStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def now(self) -> datetime:
        """PostgreSQL's clock: what ``updated_at`` is written with."""
        async with self.engine.connect() as connection:
            value: datetime = (await connection.execute(_NOW)).scalar_one()
        return value

    @retry_on_dead_connection
    async def all_waiting(self) -> list[VmRecord]:
        async with self.engine.connect() as connection:
            return [vm_from_row(row) for row in await connection.execute(_ALL_WAITING)]

    @retry_on_dead_connection
    async def entered_since(self, since: datetime) -> list[Entered]:
        async with self.engine.connect() as connection:
            rows = await connection.execute(_ENTERED_SINCE, {"since": since})
            return [Entered(row.id, row.attempt, row.updated_at) for row in rows]

    @retry_on_dead_connection
    async def rows(self, vm_ids: Sequence[UUID]) -> list[VmRecord]:
        """The named VMs that are waiting now."""
        if not vm_ids:
            return []
        async with self.engine.connect() as connection:
            return [vm_from_row(row) for row in await connection.execute(_ROWS, {"ids": list(vm_ids)})]

    @retry_on_dead_connection
    async def wake(self, wanted: Sequence[tuple[UUID, int]]) -> list[VmRecord]:
        """waiting -> pending (attempt + 1, its vm.create unsent) for each (VM, attempt) still waiting
        at that attempt; returns the VMs woken, as they are now."""
        if not wanted:
            return []
        ids = [vm_id for vm_id, _ in wanted]
        async with self.engine.begin() as connection:
            rows = await connection.execute(_WAKE, {"ids": ids, "attempts": [attempt for _, attempt in wanted]})
            return [vm_from_row(row) for row in rows]

    @retry_on_dead_connection
    async def expire(self, limit: int = 1000) -> list[Unplaced]:
        """waiting -> unschedulable for the VMs whose wait_until passed (by PostgreSQL's clock), with
        the last reason; returns what vm.unschedulable says of each."""
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_EXPIRE, {"limit": limit})).all()
        return [_unplaced(row.id, row.attempt, row.placement, row.project) for row in rows]


def _unplaced(vm_id: UUID, attempt: int, placement: dict[str, object] | None, project: str) -> Unplaced:
    record = PlacementRecord.model_validate(placement) if placement else None
    if record is None:
        return Unplaced(
            vm_id=vm_id,
            attempt=attempt,
            reason=UnschedulableReason.NO_AVAILABLE_AGENTS,
            detail="",
            project=project,
        )
    return Unplaced(
        vm_id=vm_id,
        attempt=attempt,
        reason=record.reason or UnschedulableReason.NO_AVAILABLE_AGENTS,
        detail=record.detail or "",
        rejections=dict(record.rejections),
        project=project,
    )
