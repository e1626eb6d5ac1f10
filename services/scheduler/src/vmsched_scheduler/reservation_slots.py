"""A VM naming a reservation takes one of its held slots: the room the engine chose when it placed
the reservation (:mod:`vmsched_scheduler.reservations` places and expires reservations)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from vmsched_contract.decision import PlacementRecord
from vmsched_redis.claims import Claim
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.metrics import PLACEMENTS
from vmsched_scheduler.ports import Committed, NoHost, Placement
from vmsched_scheduler.round_items import (
    Assigned,
    Later,
    NotPlaced,
    OpenVm,
    Outcome,
    Waiting,
    announced,
    assignment_of,
    unplaced_of,
    waiting_of,
)
from vmsched_scheduler.tracing import traced_step

if TYPE_CHECKING:
    from vmsched_scheduler.round import SchedulingRound

log = get_logger("vmsched_scheduler")

RESERVATION = "reservation"  # the reason of a VM whose reservation holds no slot for it


async def take_slot(scheduling_round: SchedulingRound, work: OpenVm) -> Outcome:
    """Place a VM naming a reservation in the room one of its held slots keeps: PostgreSQL first, in
    one transaction (the slot becomes ``used``, the VM ``scheduled`` there, the host's allocations
    trade the slot for the VM); then Redis, in one script, the slot's claim becomes the VM's, so
    that no other VM can take the room in between. No slot left: the VM fits nowhere, with the
    reservation's state as the reason."""
    ledger = scheduling_round.ledger
    vm = work.item.vm
    assert vm.reservation is not None
    record = PlacementRecord(
        strategy=work.strategy,
        host=None,
        considered=0,
        eligible=0,
        decided_at=datetime.now(UTC),
        decision_us=0.0,
        detail=f"reservation {vm.reservation}",
    )
    placement = Placement(vm.vm_id, vm.attempt, "", vm.resources, work.strategy, record)
    with traced_step("reservation", [work.item.trace]) as spans:
        taken = await ledger.take_slot(placement, vm.reservation, vm.project)
        spans.outcomes([taken.outcome.value])
    if taken.outcome is Committed.SLOT_BUSY:
        return Later("its reservation is not placed yet, or other VMs are taking its slots")
    if taken.outcome is Committed.NOT_PENDING:
        return announced(vm, (await ledger.load([vm.vm_id])).get(vm.vm_id))
    if taken.outcome is Committed.NO_SLOT:
        no_host = NoHost(
            vm.vm_id,
            vm.attempt,
            work.strategy,
            f"{RESERVATION}: {taken.why}",
            record.model_copy(update={"reason": RESERVATION, "detail": taken.why}),
        )
        settled = await ledger.settle([], [no_host])
        if settled.no_hosts[0] is Committed.UNSCHEDULABLE:
            PLACEMENTS.labels(work.strategy.value, "unschedulable").inc()
            log.warning(f"No slot for VM '{vm.name}': {taken.why}", vm_id=str(vm.vm_id))
            return NotPlaced(unplaced_of(vm, no_host.record), True)
        if settled.no_hosts[0] is Committed.WAITING:
            return Waiting(waiting_of(vm, no_host.record, settled.wait_until[vm.vm_id]), True)
        return announced(vm, (await ledger.load([vm.vm_id])).get(vm.vm_id))
    assert taken.slot_id is not None
    assert taken.scheduled_at is not None
    placed = replace(placement, host_id=taken.host_id, record=record.model_copy(update={"host": taken.host_id}))
    swapped = await scheduling_round.claims.preempt(
        Claim(vm.vm_id, taken.host_id, vm.resources, None), [taken.slot_id], scheduling_round.clock()
    )
    if not swapped.results[0].holds:
        log.warning(
            "slot taken but the snapshot refused the swap; the reconcile will restore it",
            vm_id=str(vm.vm_id),
            host=taken.host_id,
            outcome=swapped.results[0].outcome,
        )
    await scheduling_round.fleet.reread({taken.host_id})
    PLACEMENTS.labels(work.strategy.value, "reserved").inc()
    return Assigned(assignment_of(vm, placed, taken.scheduled_at), True, scheduling_round.log_lines(vm, placed))
