"""A preemptor's create waits for its victims: the agent is told to create a VM that took the room of
lower-priority VMs only once it has reported every one of them deleted, so a hypervisor never holds
both (the room was the victims' until then).

The scheduler commits the preemption and sends the victims' deletes; ``vm.assigned`` reaches the
relay, which holds back the creates of VMs whose victims are still ``preempted``; the report of the
last victim's deletion sends the create. The stale-command sweep skips such VMs too
(:data:`NO_VICTIMS_LEFT`), and sends the create if that report's send was lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord
from vmsched_pg.rows import VM_COLUMNS, vm_from_row

# SQL: the VM aliased ``v`` has no victim left to delete.
NO_VICTIMS_LEFT = (
    f"NOT EXISTS (SELECT 1 FROM vms p WHERE p.preempted_by = v.id AND p.status = '{VmStatus.PREEMPTED.value}')"
)

_AWAITING = text(
    f"""
    SELECT DISTINCT preempted_by FROM vms
     WHERE preempted_by = ANY(CAST(:ids AS uuid[])) AND status = '{VmStatus.PREEMPTED.value}'
    """
)
_READY = text(
    f"SELECT {VM_COLUMNS} FROM vms v WHERE v.id = :id AND v.status = '{VmStatus.SCHEDULED.value}' AND {NO_VICTIMS_LEFT}"
)


class Preemptors:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def awaiting_victims(self, vm_ids: Sequence[UUID]) -> set[UUID]:
        """Those of ``vm_ids`` that preempted VMs not yet reported deleted."""
        if not vm_ids:
            return set()
        async with self.engine.connect() as connection:
            return {row.preempted_by for row in await connection.execute(_AWAITING, {"ids": list(vm_ids)})}

    async def ready(self, preemptor: UUID) -> VmRecord | None:
        """The preemptor, once its last victim is gone and it still waits for its create."""
        async with self.engine.connect() as connection:
            row = (await connection.execute(_READY, {"id": preemptor})).first()
        return None if row is None else vm_from_row(row)
