"""The gateway's writes of what agents report about a VM's task (a migration's step, a stop, a
start), through :mod:`vmsched_domain.live_migration` and the lifecycle, and its sweeps of tasks: those
unanswered for a while (their command is sent again), migrations in flight too long (rolled back) and
migrations one of whose hosts is fenced (rolled back, or failed with their source).

One VM at a time: the row locked, the change computed by the pure functions, written with
:func:`vmsched_pg.vm_writes.apply` (which gives a host's share back in the same transaction).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_contract.messages import VmStatusReport
from vmsched_contract.status import VmStatus
from vmsched_domain import live_migration
from vmsched_domain.lifecycle import TASK_STATUS
from vmsched_domain.live_migration import Step
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import Change, power_reported
from vmsched_pg import vm_writes
from vmsched_pg.rows import VM_COLUMNS, vm_from_row

# Migrations asked for longer ago than the timeout; found through the index of VMs with a task.
_TIMED_OUT = text(
    f"""
    SELECT {VM_COLUMNS} FROM vms
     WHERE task IS NOT NULL AND status = '{VmStatus.MIGRATING.value}'
       AND task_since < now() - make_interval(secs => :timeout)
     ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED
    """
)
_FENCED_HOSTS = text("SELECT id FROM hosts WHERE fenced_at IS NOT NULL")
# Migrations from or to one of the fenced hosts (usually there are none: this is not asked then).
_TOUCHING_FENCED = text(
    f"""
    SELECT {VM_COLUMNS} FROM vms
     WHERE task IS NOT NULL AND status = '{VmStatus.MIGRATING.value}'
       AND (hypervisor_id = ANY(CAST(:hosts AS text[])) OR migration_target = ANY(CAST(:hosts AS text[])))
     ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED
    """
)
# A task is in flight only while its VM has the task's status (lifecycle.TASK_STATUS); one left on a
# VM that failed or was deleted meanwhile is over.
_TASK_IN_FLIGHT = " OR ".join(
    f"(task = '{task.value}' AND status = '{status.value}')" for task, status in TASK_STATUS.items()
)
# VMs whose task has waited on an agent (or a scheduler) for a while: updated_at is bumped so each is
# sent again once per period.
_TOUCH_STALE_TASKS = text(
    f"""
    UPDATE vms SET updated_at = now()
     WHERE id IN (SELECT id FROM vms
                   WHERE task IS NOT NULL AND updated_at < now() - make_interval(secs => :stale)
                     AND ({_TASK_IN_FLIGHT})
                   ORDER BY updated_at LIMIT :limit FOR UPDATE SKIP LOCKED)
    RETURNING {VM_COLUMNS}
    """
)


# The migration URIs the hosts' agents announce (hosts.migration_uri, from their heartbeats).
_MIGRATION_URIS = text(
    "SELECT id, migration_uri FROM hosts WHERE id = ANY(CAST(:ids AS text[])) AND migration_uri IS NOT NULL"
)


class TaskStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def migration_report(self, report: VmStatusReport) -> Step | None:
        """A report on a migration's command: the step it makes (committed), or None when it changes
        nothing (late, repeated, another migration's, from the wrong host)."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(vm_writes.LOCK_VMS, {"ids": [report.vm_id]})).first()
            if row is None:
                return None
            step = live_migration.on_report(vm_from_row(row), report, time.time())
            if step is None or not await vm_writes.apply(connection, [step.change]):
                return None
        return step

    async def power_report(self, report: VmStatusReport) -> Change | None:
        """A report on a stop or a start: the change it makes (committed), or None."""
        if report.action is None:
            return None
        async with self.engine.begin() as connection:
            row = (await connection.execute(vm_writes.LOCK_VMS, {"ids": [report.vm_id]})).first()
            if row is None:
                return None
            change = power_reported(vm_from_row(row), report.agent_id, report.action, report.status, report.message)
            if change is None or not await vm_writes.apply(connection, [change]):
                return None
        return change

    async def time_out_migrations(self, timeout: float, limit: int = 500) -> list[Step]:
        """Migrations in flight for ``timeout`` seconds or more, rolled back (committed)."""
        now = time.time()
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_TIMED_OUT, {"timeout": timeout, "limit": limit})).all()
            return await _write(connection, rows, lambda vm: live_migration.timed_out(vm, now, timeout))

    async def fence_migrations(self, *, exclude_for: float, limit: int = 500) -> list[Step]:
        """Migrations from or to a fenced host, called off (committed): rolled back, or, their source
        fenced, rolled back and failed (:func:`vmsched_domain.live_migration.host_fenced`)."""
        now = time.time()
        async with self.engine.begin() as connection:
            fenced = {row.id for row in await connection.execute(_FENCED_HOSTS)}
            if not fenced:
                return []
            rows = (await connection.execute(_TOUCHING_FENCED, {"hosts": sorted(fenced), "limit": limit})).all()
            return await _write(
                connection, rows, lambda vm: live_migration.host_fenced(vm, fenced, now, exclude_for=exclude_for)
            )

    async def migration_uris(self, hosts: Collection[str]) -> dict[str, str]:
        """The migration URI each of ``hosts`` announces (hosts that announce none are left out)."""
        async with self.engine.connect() as connection:
            rows = (await connection.execute(_MIGRATION_URIS, {"ids": sorted(hosts)})).all()
        return {row.id: row.migration_uri for row in rows}

    async def touch_stale_tasks(self, stale_after: float, limit: int = 500) -> list[VmRecord]:
        """VMs whose task has waited ``stale_after`` seconds, marked so the next call skips them."""
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_TOUCH_STALE_TASKS, {"stale": stale_after, "limit": limit})).all()
        return [vm_from_row(row) for row in rows]


async def _write(
    connection: AsyncConnection, rows: Sequence[Row[Any]], step_of: Callable[[VmRecord], Step | None]
) -> list[Step]:
    """The step each locked row makes, written in the caller's transaction; those that landed."""
    steps = [step for row in rows if (step := step_of(vm_from_row(row))) is not None]
    landed = {change.after.id for change in await vm_writes.apply(connection, [c for s in steps for c in s.changes])}
    return [step for step in steps if step.change.after.id in landed]
