"""What message a committed VM row's status implies, until the broker confirms it: ``vm.create`` for a
pending VM, the delete command to its host for a deleting or preempted one (pure: no I/O). The outbox
(:mod:`vmsched_pg.outbox`) publishes them after the commit and sweeps up those never confirmed."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from vmsched_contract.messages import AgentCommand, CommandAction, VmToPlace
from vmsched_contract.status import VmStatus
from vmsched_domain.lifecycle import IMPLIES_DELETE
from vmsched_domain.records import VmRecord


@dataclass(frozen=True, slots=True)
class ImpliedMessages:
    """The messages some rows imply: delete commands (each with the host it goes to), and the VMs
    of each ``vm.create`` (an all-or-nothing batch's in one of its own: a scheduler decides a gang
    from one message; every other VM in one more)."""

    deletes: list[tuple[str, AgentCommand]]
    creates: list[list[VmToPlace]]


def implied_messages(rows: Sequence[VmRecord], now: float) -> ImpliedMessages:
    """The messages ``rows`` imply, their exclusions as in force at ``now``."""
    pending = [vm.to_place(now) for vm in rows if vm.status is VmStatus.PENDING]
    deletes = [
        (vm.hypervisor_id, vm.command(CommandAction.DELETE))
        for vm in rows
        if vm.status in IMPLIES_DELETE and vm.hypervisor_id is not None
    ]
    gangs: dict[UUID, list[VmToPlace]] = defaultdict(list)
    for vm in pending:
        if vm.gang is not None:
            gangs[vm.gang].append(vm)
    creates = list(gangs.values())
    alone = [vm for vm in pending if vm.gang is None]
    if alone:
        creates.append(alone)
    return ImpliedMessages(deletes, creates)
