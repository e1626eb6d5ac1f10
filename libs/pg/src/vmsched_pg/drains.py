"""Drains in PostgreSQL (``host_drains``): starting one (the host paused in the same transaction),
reading where one stands, ending one (the host unpaused), and the sweep that carries them out: each
active drain locked (``SKIP LOCKED``: one gateway replica sweeps a drain at a time), its next step
computed by :func:`vmsched_domain.drain.step`, its migrations started through
:func:`vmsched_pg.vm_actions.start_migration` (the same path as ``POST /v1/vms/{id}/migrate``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_contract.status import DrainState
from vmsched_domain.disruption import Budget
from vmsched_domain.drain import Drain, Progress, step
from vmsched_domain.records import HostRecord, VmRecord
from vmsched_pg import vm_actions
from vmsched_pg.budgets import budgets
from vmsched_pg.rows import HOST_COLUMNS, VM_COLUMNS, host_from_row, vm_from_row
from vmsched_pg.shares import SHARES

_LOCK_HOST = text(f"SELECT {HOST_COLUMNS} FROM hosts WHERE id = :id FOR UPDATE")
_SET_PAUSED = text(f"UPDATE hosts SET scheduling_paused = :paused WHERE id = :id RETURNING {HOST_COLUMNS}")
_DRAIN_COLUMNS = "host_id, evacuate, max_parallel, deadline_at, state, started, failures, created_at, ended_at"
_INSERT = text(
    f"""
    INSERT INTO host_drains (host_id, evacuate, max_parallel, deadline_at, state)
    VALUES (:host_id, :evacuate, :max_parallel, now() + make_interval(secs => :deadline_s), :state)
    ON CONFLICT (host_id) DO NOTHING
    RETURNING {_DRAIN_COLUMNS}
    """
)
_GET = text(f"SELECT {_DRAIN_COLUMNS} FROM host_drains WHERE host_id = :host_id")
_STATES = text("SELECT host_id, state FROM host_drains")
_DELETE = text("DELETE FROM host_drains WHERE host_id = :host_id RETURNING host_id")
_LOCK_ACTIVE = text(
    f"""
    SELECT {_DRAIN_COLUMNS} FROM host_drains WHERE state = '{DrainState.DRAINING.value}'
     ORDER BY host_id LIMIT :limit FOR UPDATE SKIP LOCKED
    """
)
_UPDATE = text(
    """
    UPDATE host_drains
       SET started = CAST(:started AS jsonb), failures = CAST(:failures AS jsonb), state = CAST(:state AS text),
           ended_at = CASE WHEN CAST(:state AS text) = 'draining' THEN NULL ELSE coalesce(ended_at, now()) END
     WHERE host_id = :host_id
    """
)
# Every VM holding a share of the host (as its source or a migration's target), and those the drain
# started, wherever they are now. VMs only (SHARES, not HOLDINGS): a reservation's held slot is room
# no migration moves, so it never keeps a drain from ending.
_RESIDENTS = text(
    f"""
    SELECT {VM_COLUMNS} FROM vms
     WHERE id IN (SELECT vm_id FROM ({SHARES}) shares WHERE host_id = :host_id)
        OR id = ANY(CAST(:started AS uuid[]))
     ORDER BY id
    """
)


class AlreadyDraining(Exception):
    """The host has a drain already (end it first: ``DELETE /v1/hosts/{id}/drain``)."""


@dataclass(frozen=True, slots=True)
class StoredDrain:
    """A drain as stored, with where it stands now."""

    drain: Drain
    created_at: datetime
    ended_at: datetime | None
    progress: Progress


def _drain_of(row: Any) -> Drain:
    return Drain(
        host_id=row.host_id,
        evacuate=row.evacuate,
        max_parallel=row.max_parallel,
        deadline=row.deadline_at.timestamp(),
        state=DrainState(row.state),
        started={str(vm_id): int(number) for vm_id, number in (row.started or {}).items()},
        failures={str(vm_id): (str(f["reason"]), float(f["at"])) for vm_id, f in (row.failures or {}).items()},
    )


async def _residents(connection: AsyncConnection, drain: Drain) -> list[VmRecord]:
    params = {"host_id": drain.host_id, "started": list(drain.started)}
    return [vm_from_row(row) for row in await connection.execute(_RESIDENTS, params)]


async def _group_budgets(connection: AsyncConnection, residents: list[VmRecord]) -> dict[UUID, Budget]:
    return await budgets(connection, [vm.server_group for vm in residents if vm.server_group is not None])


async def _stored(connection: AsyncConnection, row: Any) -> StoredDrain:
    drain = _drain_of(row)
    residents = await _residents(connection, drain)
    progress = step(drain, residents, time.time(), await _group_budgets(connection, residents)).progress
    # The state as the sweep recorded it (with its ended_at): the lists are read now.
    progress = Progress(drain.state, progress.moved, progress.in_flight, progress.stuck, progress.queued)
    return StoredDrain(drain, row.created_at, row.ended_at, progress)


class DrainStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def start(
        self, host_id: str, *, evacuate: bool, deadline_s: int, max_parallel: int
    ) -> tuple[HostRecord, StoredDrain] | None:
        """Pause the host and record its drain, in one transaction (under the host's row lock, as an
        operator's PATCH). None for an unknown host; raises :class:`AlreadyDraining`."""
        async with self.engine.begin() as connection:
            if (await connection.execute(_LOCK_HOST, {"id": host_id})).first() is None:
                return None
            params = {
                "host_id": host_id,
                "evacuate": evacuate,
                "max_parallel": max_parallel,
                "deadline_s": deadline_s,
                "state": DrainState.DRAINING.value,
            }
            row = (await connection.execute(_INSERT, params)).first()
            if row is None:
                raise AlreadyDraining(f"host {host_id} is draining already (DELETE its drain first)")
            host = (await connection.execute(_SET_PAUSED, {"id": host_id, "paused": True})).one()
            return host_from_row(host), await _stored(connection, row)

    async def get(self, host_id: str) -> StoredDrain | None:
        async with self.engine.connect() as connection:
            row = (await connection.execute(_GET, {"host_id": host_id})).first()
            return None if row is None else await _stored(connection, row)

    async def states(self) -> dict[str, DrainState]:
        """Every drained or draining host's drain state (few: hosts in maintenance)."""
        async with self.engine.connect() as connection:
            return {row.host_id: DrainState(row.state) for row in await connection.execute(_STATES)}

    async def end(self, host_id: str) -> HostRecord | None:
        """End the host's drain, whatever its state (cancelled, or done: the host back in service),
        and unpause the host. Migrations in flight finish on their own. None when it has none."""
        async with self.engine.begin() as connection:
            if (await connection.execute(_LOCK_HOST, {"id": host_id})).first() is None:
                return None
            if (await connection.execute(_DELETE, {"host_id": host_id})).first() is None:
                return None
            host = (await connection.execute(_SET_PAUSED, {"id": host_id, "paused": False})).one()
        return host_from_row(host)

    async def sweep(self, limit: int = 100) -> list[VmRecord]:
        """One step of every active drain (those another replica sweeps now are skipped): the
        migrations its step starts are committed (each in its own transaction, as the API's), the
        drain's record updated. Returns the VMs whose ``vm.migrate`` the caller publishes."""
        announce: list[VmRecord] = []
        async with self.engine.begin() as connection:
            for row in (await connection.execute(_LOCK_ACTIVE, {"limit": limit})).all():
                drain = _drain_of(row)
                now = time.time()
                residents = await _residents(connection, drain)
                planned = step(drain, residents, now, await _group_budgets(connection, residents))
                started = dict(drain.started)
                failures = dict(planned.failures)
                for vm_id in planned.start:
                    try:
                        vm = await vm_actions.start_migration(self.engine, vm_id, budgeted=True)
                    except vm_actions.BudgetSpent:
                        continue  # another drain or plan took the budget first: tried again next sweep
                    except (vm_actions.Refused, vm_actions.BadTarget) as refused:
                        failures[str(vm_id)] = (str(refused), now)
                        continue
                    if vm is not None:
                        started[str(vm_id)] = vm.migrations
                        announce.append(vm)
                await connection.execute(
                    _UPDATE,
                    {
                        "host_id": drain.host_id,
                        "started": json.dumps(started),
                        "failures": json.dumps({k: {"reason": r, "at": at} for k, (r, at) in failures.items()}),
                        "state": _next_state(planned.progress.state, bool(planned.start)).value,
                    },
                )
        return announce


def _next_state(computed: DrainState, starting: bool) -> DrainState:
    # A step that starts migrations has VMs in flight from now on, whatever it computed before.
    return DrainState.DRAINING if starting else computed


def deadline_of(stored: StoredDrain) -> datetime:
    return datetime.fromtimestamp(stored.drain.deadline, UTC)
