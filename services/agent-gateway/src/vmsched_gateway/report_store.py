"""The gateway's writes of what agents report about VMs (``vm.status``), through the lifecycle.

"running" is most of the traffic (one per placed VM) and is applied in batches of one statement.
"deleted" (one per deleted VM) and "failed" are applied in batches too, one transaction each: the
rows locked, each change computed by :mod:`vmsched_domain.vm_changes`, written with
:func:`vmsched_pg.vm_writes.apply` (which gives capacity back in the same transaction). One at a time,
each cost five round trips and a transaction, the most of any work the gateway did under churn.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import ReportedStatus
from vmsched_domain.lifecycle import Event, sources, sql_in, transitions
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import Change, agent_delete_failed, agent_deleted, agent_failed
from vmsched_pg import vm_writes
from vmsched_pg.engine import lone_statement
from vmsched_pg.rows import VM_COLUMNS, vm_from_row

_RUNNING = {t.target for t in transitions(Event.AGENT_RUNNING)}
assert len(_RUNNING) == 1, "agent_running leads to one status"
RUNNING = next(iter(_RUNNING)).value

# Rows are locked in id order, so two batches (or a batch and the health check) cannot deadlock; they
# are found by id alone and the report checked against the locked row (a status or host condition in
# the lookup can lead the planner to walk every VM of that status).
_MARK_RUNNING = text(
    f"""
    WITH target AS (
        SELECT v.id, v.status, v.hypervisor_id, r.agent_id FROM vms v
          JOIN unnest(CAST(:ids AS uuid[]), CAST(:agents AS text[])) AS r(id, agent_id) ON v.id = r.id
         ORDER BY v.id
           FOR UPDATE OF v
    )
    UPDATE vms SET status = '{RUNNING}', status_reason = NULL, started_at = coalesce(started_at, now()),
                   updated_at = now()
      FROM target
     WHERE vms.id = target.id AND target.hypervisor_id = target.agent_id
       AND target.status IN {sql_in(sources(Event.AGENT_RUNNING))}
    RETURNING vms.id
    """
)
_SELECT_VMS = text(f"SELECT {VM_COLUMNS} FROM vms WHERE id = ANY(CAST(:ids AS uuid[]))")


@dataclass(frozen=True, slots=True)
class RunningReport:
    applied: bool  # the VM runs there now (or already did)
    vm: VmRecord | None  # when not applied: the VM as PostgreSQL has it (None: unknown to vmsched)


@dataclass(frozen=True, slots=True)
class AgentReport:
    """A "failed" or "deleted" report of ``vm_id`` from ``agent_id``."""

    vm_id: UUID
    agent_id: str
    status: ReportedStatus
    message: str = ""


@dataclass(frozen=True, slots=True)
class Reported:
    vm: VmRecord | None  # the VM before the report (None: unknown to vmsched)
    change: Change | None  # what the report changed (None: nothing)


class ReportStore:
    def __init__(self, engine: AsyncEngine, *, max_attempts: int, exclude_for: float) -> None:
        self.engine = engine
        self.max_attempts = max_attempts
        self.exclude_for = exclude_for

    async def mark_running(self, reports: Sequence[tuple[UUID, str]]) -> list[RunningReport]:
        """(vm, agent) reports of "running", in one statement (atomic alone: no BEGIN and COMMIT
        round trips); the VMs it did not apply to are read as they are now."""
        ids = [vm_id for vm_id, _ in reports]
        async with lone_statement(self.engine) as connection:
            applied = {
                row.id
                for row in await connection.execute(
                    _MARK_RUNNING, {"ids": ids, "agents": [agent_id for _, agent_id in reports]}
                )
            }
        missed = sorted({vm_id for vm_id in ids if vm_id not in applied})
        current = {}
        if missed:
            async with self.engine.connect() as connection:
                current = {row.id: vm_from_row(row) for row in await connection.execute(_SELECT_VMS, {"ids": missed})}
        return [RunningReport(vm_id in applied, None if vm_id in applied else current.get(vm_id)) for vm_id in ids]

    async def report_many(self, reports: Sequence[AgentReport]) -> list[Reported]:
        """ "failed" and "deleted" reports, in order, in one transaction: for each, the VM as it was
        and the change the report made (None when it changed nothing: late, repeated, or from a host
        the VM is not on). Two reports of one VM see each other, as they would one after the other."""
        now = time.time()
        async with self.engine.begin() as connection:
            locked = await connection.execute(vm_writes.LOCK_VMS, {"ids": sorted({r.vm_id for r in reports})})
            current = {row.id: vm_from_row(row) for row in locked}
            made: list[tuple[VmRecord | None, Change | None]] = []
            for report in reports:
                vm = current.get(report.vm_id)
                change = None if vm is None else self._change(vm, report, now)
                if change is not None:
                    current[report.vm_id] = change.after
                made.append((vm, change))
            landed = {id(change) for change in await vm_writes.apply(connection, [c for _, c in made if c])}
        return [Reported(vm, change if id(change) in landed else None) for vm, change in made]

    def _change(self, vm: VmRecord, report: AgentReport, now: float) -> Change | None:
        if report.status is ReportedStatus.DELETED:
            return agent_deleted(vm, report.agent_id, now)
        return agent_delete_failed(vm, report.agent_id, report.message) or agent_failed(
            vm, report.agent_id, report.message, now, max_attempts=self.max_attempts, exclude_for=self.exclude_for
        )
