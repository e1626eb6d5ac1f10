"""The gateway's periodic writes: VMs whose restart policy brings them back, and scheduled VMs
whose create command went unanswered (sent again)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import RestartPolicy
from vmsched_contract.status import VmStatus
from vmsched_domain.lifecycle import Event, sources, sql_in
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import Change, restart
from vmsched_gateway.preemptors import NO_VICTIMS_LEFT
from vmsched_pg import vm_writes
from vmsched_pg.rows import VM_COLUMNS, vm_from_row

# Failed VMs that ran, whose restart policy says on_failure, once the restart delay has passed.
_RESTART_DUE = text(
    f"""
    SELECT {VM_COLUMNS} FROM vms
     WHERE status IN {sql_in(sources(Event.RESTART))} AND restart_policy = '{RestartPolicy.ON_FAILURE.value}'
       AND started_at IS NOT NULL AND failed_at < now() - make_interval(secs => :delay)
     ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED
    """
)
# Scheduled VMs no agent has answered for a while: their vm.assigned or command may have been
# dead-lettered after broker restarts. updated_at is bumped so each is re-sent once per period. A
# preemptor whose victims are not all deleted yet waits for them (see preemptors).
_TOUCH_STALE_SCHEDULED = text(
    f"""
    UPDATE vms SET updated_at = now()
     WHERE id IN (SELECT id FROM vms v
                   WHERE status = '{VmStatus.SCHEDULED.value}' AND updated_at < now() - make_interval(secs => :stale)
                     AND {NO_VICTIMS_LEFT}
                   ORDER BY updated_at LIMIT :limit FOR UPDATE OF v SKIP LOCKED)
    RETURNING {VM_COLUMNS}
    """
)


class SweepStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def restart_due(self, delay: float, limit: int = 500) -> list[Change]:
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_RESTART_DUE, {"delay": delay, "limit": limit})).all()
            changes = [change for row in rows if (change := restart(vm_from_row(row))) is not None]
            return await vm_writes.apply(connection, changes) if changes else []

    async def touch_stale_scheduled(self, stale_after: float, limit: int = 500) -> list[VmRecord]:
        """Scheduled VMs unanswered for ``stale_after`` seconds, marked so the next call skips them."""
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_TOUCH_STALE_SCHEDULED, {"stale": stale_after, "limit": limit})).all()
        return [vm_from_row(row) for row in rows]
