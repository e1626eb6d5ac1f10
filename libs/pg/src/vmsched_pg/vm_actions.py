"""Starting a migration, a stop or a start, from whichever service asks: the API's routes today, a
drain or a rebalance tomorrow. The one place that checks that the VM and its hosts allow it, records
it (through the lifecycle, :mod:`vmsched_domain.live_migration`, :mod:`vmsched_domain.vm_changes`); the
caller then sends what the committed change implies (``vm.migrate``, or the agent's stop or start
command: :func:`vmsched_domain.vm_changes.power_command`).

A drain moves each VM of a host with :func:`start_migration` then sends ``vm.migrate``, and reads
how each migration ended with :func:`vmsched_domain.live_migration.outcome` on the VM's row (or follows
``vm.migrated`` and ``vm.migration_failed``).
"""

from __future__ import annotations

import time
from enum import StrEnum
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import Capability
from vmsched_contract.status import VmStatus
from vmsched_domain import live_migration
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import start_requested, stop_requested
from vmsched_pg import vm_writes
from vmsched_pg.budgets import budgets
from vmsched_pg.rows import vm_from_row

_HOST_CAPABILITIES = text("SELECT id, capabilities FROM hosts WHERE id = ANY(CAST(:ids AS text[]))")


class Refused(Exception):
    """The VM (or a host of it) cannot do what was asked as it is now; nothing changed (HTTP 409)."""


class BudgetSpent(Refused):
    """A drain's or a rebalance plan's migration would take one more member of a server group than
    its disruption budget allows (vmsched_domain.disruption); nothing changed: try again later."""


class BadTarget(Exception):
    """A migration's ``target_host`` that can never take the VM (unknown, its own host); nothing
    changed (HTTP 422)."""


class PowerAction(StrEnum):
    STOP = "stop"
    START = "start"


async def start_migration(
    engine: AsyncEngine,
    vm_id: UUID,
    target_host: str | None = None,
    project: str | None = None,
    *,
    budgeted: bool = False,
) -> VmRecord | None:
    """Start the VM's next migration (``migrating``, task choosing_target): a running VM with nothing
    in flight, on a host that can migrate, towards ``target_host`` (a known host that can migrate, not
    its own) or one a scheduler chooses. ``budgeted`` (a drain's, a rebalance plan's): only while its
    server group's disruption budget allows one more member unavailable, checked under the group's
    row lock. Returns the VM as committed (its ``migrations`` is the migration's number), None for an
    unknown VM or one of another project than ``project`` (None: any); raises :class:`Refused` (its
    :class:`BudgetSpent`) or :class:`BadTarget`."""
    async with engine.begin() as connection:
        row = (await connection.execute(vm_writes.LOCK_VMS, {"ids": [vm_id]})).first()
        if row is None or (project is not None and row.project != project):
            return None
        vm = vm_from_row(row)
        change = live_migration.requested(vm, target_host, time.time())
        if change is None:
            raise Refused(_why_not(vm, "migrate", VmStatus.RUNNING))
        source = str(vm.hypervisor_id)
        if target_host == source:
            raise BadTarget(f"{target_host} is the VM's own host")
        asked = [source] if target_host is None else [source, target_host]
        capabilities = {r.id: r.capabilities for r in await connection.execute(_HOST_CAPABILITIES, {"ids": asked})}
        if target_host is not None and target_host not in capabilities:
            raise BadTarget(f"no host {target_host}")
        for host_id in asked:
            if Capability.MIGRATE.value not in (capabilities.get(host_id) or []):
                raise Refused(
                    f"host {host_id} cannot migrate VMs (its agent does not declare the 'migrate' capability)"
                )
        if budgeted and vm.server_group is not None:
            budget = (await budgets(connection, [vm.server_group], lock=True)).get(vm.server_group)
            why = None if budget is None else budget.refusal()
            if why is not None:
                raise BudgetSpent(why)
        await vm_writes.apply(connection, [change])
    return change.after


async def request_power(
    engine: AsyncEngine, vm_id: UUID, action: PowerAction, project: str | None = None
) -> VmRecord | None:
    """Stop a running VM or start a stopped one (task stopping or starting until its agent confirms);
    its host keeps its room either way. None for an unknown VM or one of another project than
    ``project`` (None: any); raises :class:`Refused`."""
    async with engine.begin() as connection:
        row = (await connection.execute(vm_writes.LOCK_VMS, {"ids": [vm_id]})).first()
        if row is None or (project is not None and row.project != project):
            return None
        vm = vm_from_row(row)
        requested = stop_requested if action is PowerAction.STOP else start_requested
        change = requested(vm, time.time())
        if change is None:
            wanted = VmStatus.RUNNING if action is PowerAction.STOP else VmStatus.STOPPED
            raise Refused(_why_not(vm, action.value, wanted))
        found = (await connection.execute(_HOST_CAPABILITIES, {"ids": [vm.hypervisor_id]})).first()
        if found is None or Capability.POWER.value not in (found.capabilities or []):
            raise Refused(
                f"host {vm.hypervisor_id} cannot {action.value} VMs (its agent does not declare the 'power' capability)"
            )
        await vm_writes.apply(connection, [change])
    return change.after


def _why_not(vm: VmRecord, action: str, wanted: VmStatus) -> str:
    if vm.status is not wanted:
        return f"VM {vm.id} is {vm.status.value}: only a {wanted.value} VM can {action}"
    return f"VM {vm.id} has a task in flight ({vm.task.value if vm.task else 'none'}); try again once it ends"
