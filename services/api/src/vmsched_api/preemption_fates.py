"""What became of a preemption's victims, as their rows say now (issue 27: "the replay of such a
decision names the victims and where they went").

A victim is ``moved`` when the preemption live-migrated it off its host, ``deleted`` when its agent
was told to delete it (a victim whose move rolled back is deleted by the preemptor's next try). Where
it is now follows from its status: the host it runs on (moved there, or restarted there by its
restart policy after a delete), the target claimed while it is still moving, nowhere once deleted
or failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

from vmsched_contract.api import VictimFate
from vmsched_contract.messages import PreemptionOutcome
from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord

# Statuses in which a VM holds a place on its host (hypervisor_id) and may run there.
_ON_A_HOST = frozenset({VmStatus.SCHEDULED, VmStatus.RUNNING, VmStatus.UNKNOWN, VmStatus.STOPPED})


def where_now(vm: VmRecord, outcome: PreemptionOutcome) -> str | None:
    """The host the victim is on now: None when it runs nowhere (deleted, failed, waiting)."""
    if vm.status is VmStatus.MIGRATING:
        # Moving for the preemption: the target claimed for it (None until chosen); migrating
        # after a restart elsewhere: it still runs on its source.
        return vm.migration_target if outcome is PreemptionOutcome.MOVED else vm.hypervisor_id
    return vm.hypervisor_id if vm.status in _ON_A_HOST else None


def fates(
    victims: Sequence[UUID],
    from_host: str,
    outcome: PreemptionOutcome,
    now: Mapping[UUID, VmRecord],
    deleted_later: frozenset[UUID] = frozenset(),
) -> list[VictimFate]:
    """Each victim's fate, in ``victims``' order; ``now``: the victims' rows the caller may see
    (a missing one reads as gone); ``deleted_later``: moved victims the preemptor then deleted (a
    rolled-back move), told as deleted."""
    told = []
    for vm_id in victims:
        vm = now.get(vm_id)
        its = PreemptionOutcome.DELETED if vm_id in deleted_later else outcome
        told.append(
            VictimFate(
                vm_id=vm_id,
                outcome=its,
                from_host=from_host,
                status=None if vm is None else vm.status,
                host=None if vm is None else where_now(vm, its),
            )
        )
    return told
