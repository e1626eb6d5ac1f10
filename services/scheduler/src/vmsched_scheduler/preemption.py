"""A VM that fits nowhere takes the room of VMs of lower priority on one host (seed 001's
preemption; the choice of victims is the engine's, :mod:`vmsched_placement.preemption`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING
from uuid import UUID

from vmsched_contract.decision import PreemptionMove
from vmsched_contract.strategy import Strategy
from vmsched_placement import decide
from vmsched_placement.inputs import placement_request
from vmsched_placement.journal import PreemptionInputs, seeded
from vmsched_placement.model import Migration
from vmsched_placement.preemption import drawn, preemptible_rows
from vmsched_redis.claims import Claim
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.groups import RoundGroups
from vmsched_scheduler.metrics import CLAIM_CONFLICTS, PLACEMENTS
from vmsched_scheduler.nowhere_guard import fits_now
from vmsched_scheduler.ports import Committed
from vmsched_scheduler.round_items import Assigned, Choice, Later, Outcome, assignment_of
from vmsched_scheduler.tracing import traced_step

if TYPE_CHECKING:
    from vmsched_scheduler.round import SchedulingRound

log = get_logger("vmsched_scheduler")

# Choices of victims made again when another scheduler took them first.
PREEMPTION_TRIES = 8


async def preempt(
    scheduling_round: SchedulingRound, choice: Choice, groups: RoundGroups, outcomes: list[Outcome]
) -> bool:
    """Place a VM that fits nowhere by taking the room of VMs of lower priority on one host; False
    when no removal would make room. True when its outcome is set: placed, or :class:`Later` when
    other schedulers kept taking the victims it chose first.

    PostgreSQL first, in one transaction: the victims become ``preempted`` and give their room back,
    and the VM is placed under the host's guard. Then Redis, in one script: the victims' claims
    become the VM's. Until then the victims' claims keep the room, so no other VM takes it; should
    the script be refused (the snapshot drifted), the periodic reconcile restores the snapshot from
    PostgreSQL. Another scheduler may take the same victims first: the choice is then made again,
    against what PostgreSQL holds now."""
    # A VM with volumes does not preempt (yet): its volumes' pools would have to be freed and claimed too.
    if choice.vm.priority <= 0 or choice.gang_failure or choice.vm.volumes:
        return False
    for _ in range(PREEMPTION_TRIES):
        made = await _preempt_once(scheduling_round, choice, groups, outcomes)
        if made is not None:
            return made
    outcomes[choice.work.index] = Later("preemption: other schedulers kept taking the victims first")
    return True


async def _moved(
    rnd: SchedulingRound, choice: Choice, host_id: str, victim_ids: list[UUID], outcomes: list[Outcome]
) -> bool:
    """Move the victims off ``host_id`` instead of deleting them, when its agent can migrate and the
    engine finds each a target (vmsched_scheduler.evictions); True when their moves started (the VM
    then waits for the room, :class:`Later`)."""
    evictions = rnd.evictions
    source = rnd.fleet.fleet.host(host_id)
    if evictions is None or source is None or not source.can_migrate:
        return False
    records = await rnd.ledger.load(victim_ids)
    context = rnd.context()
    for record in records.values():
        if record.preempted_by == choice.vm.vm_id:
            return False  # moved for this VM before and rolled back: deleted this time
        target = placement_request(
            record.to_place(context.now), record.strategy or Strategy.LEAST_LOADED, migration=Migration(host_id)
        )
        if decide(rnd.fleet.fleet, target, context, fallbacks=0).host_id is None:
            return False
    moving = await evictions.evict(
        choice.vm.vm_id, choice.vm.attempt, host_id, victim_ids, choice.vm.priority, choice.journal
    )
    if not moving:
        return False
    await evictions.announce(moving, choice.vm.priority)
    log.info("preemption moves its victims", vm_id=str(choice.vm.vm_id), host=host_id, victims=len(moving))
    outcomes[choice.work.index] = Later(f"moving {len(moving)} VMs off {host_id} to make room for it")
    return True


async def _preempt_once(
    scheduling_round: SchedulingRound, choice: Choice, groups: RoundGroups, outcomes: list[Outcome]
) -> bool | None:
    """One try of :func:`preempt`: True when made, False when nothing can be, None to try again."""
    rnd = scheduling_round
    vm = choice.vm
    if rnd.evictions is not None and await rnd.evictions.moving_for(vm.vm_id):
        outcomes[choice.work.index] = Later("its victims are moving off their host to make room for it")
        return True
    request = choice.work.request(choice.placement_group, reserve=choice.reserve)
    # Among equally cheap hosts one is drawn from a seed of its own, kept in the journal.
    seed = rnd.rng.getrandbits(63)
    context = seeded(rnd.context(), seed)
    fleet = rnd.fleet.fleet
    rows = preemptible_rows(fleet, request, context)
    residents = await rnd.ledger.residents([fleet.host_at(row).id for row in rows], vm.priority)
    # The fleet as it is now (other rounds may have changed it while the residents were read): the
    # hosts chosen among and the journal's entry are both taken from it, with no await between.
    fleet = rnd.fleet.fleet
    hosts = [fleet.host_at(row) for row in preemptible_rows(fleet, request, context)]
    victims, drawn_among = drawn(hosts, request.demand, vm.priority, residents, seed)
    if victims is None:
        if await _room_on_its_way(rnd, choice, groups):
            outcomes[choice.work.index] = Later("the room its moved victims left is not in the snapshot yet")
            return True
        return False
    if rnd.journal is not None:
        kept = {v.host_id: residents[v.host_id] for v in drawn_among}
        choice.journal = rnd.journal.note(fleet, request, context, seed, PreemptionInputs(vm.priority, kept))
        await rnd.journal.flush([choice.journal])
    victim_ids = [UUID(victim.vm_id) for victim in victims.vms]
    if await _moved(rnd, choice, victims.host_id, victim_ids, outcomes):
        return True
    choice.host_id = victims.host_id
    group = groups.claim(request, fleet, context)
    placement = replace(rnd.placement_of(choice), group=group)
    with traced_step("preempt", [choice.work.item.trace]) as spans:
        result, preempted = await rnd.ledger.settle_preemption(placement, victim_ids, vm.priority)
        spans.outcomes([result.outcome.value])
    if result.outcome is not Committed.PLACED or result.scheduled_at is None:
        log.info("preemption not made", vm_id=str(vm.vm_id), host=victims.host_id, outcome=result.outcome.value)
        choice.host_id = ""
        await rnd.fleet.reread({victims.host_id})
        if result.outcome is Committed.NOT_PENDING:
            return False
        CLAIM_CONFLICTS.labels("postgres").inc()
        return None
    swapped = await rnd.claims.preempt(Claim(vm.vm_id, victims.host_id, vm.resources, group), victim_ids, rnd.clock())
    if not swapped.results[0].holds:
        log.warning(
            "preemption committed but the snapshot refused the swap; the reconcile will restore it",
            vm_id=str(vm.vm_id),
            host=victims.host_id,
            outcome=swapped.results[0].outcome,
        )
    await rnd.fleet.reread({victims.host_id})
    PLACEMENTS.labels(placement.strategy.value, "preempted").inc()
    log.info(
        f"VM '{vm.name}' (priority {vm.priority}) preempted {len(preempted)} VMs on '{victims.host_id}'",
        vm_id=str(vm.vm_id),
        victims=[str(record.id) for record in preempted],
    )
    outcomes[choice.work.index] = Assigned(
        assignment_of(vm, placement, result.scheduled_at, preempted=bool(preempted)),
        True,
        rnd.log_lines(vm, placement),
        tuple(preempted),
    )
    return True


async def _room_on_its_way(rnd: SchedulingRound, choice: Choice, groups: RoundGroups) -> bool:
    """Whether the room this VM's victims left when they were moved for it is still hidden from
    the scheduler. The gateway commits a move's end to PostgreSQL before it hands the VM's claim
    over to the target in Redis (an over-count meanwhile, never an under-count), and this VM, retried
    as soon as its victims stop migrating, can land in between: the source still looks full, the
    victims are no longer there to take, and it would be called unschedulable for want of the very
    room it waited for. The copy may also be older than the snapshot, which has the room already."""
    if rnd.evictions is None:
        return False
    own = (await rnd.ledger.load([choice.vm.vm_id])).get(choice.vm.vm_id)
    if own is None or own.preemption is None:
        return False
    kept = PreemptionMove.model_validate(own.preemption)
    victim_ids = [UUID(victim) for victim in kept.victims]
    records = await rnd.ledger.load(victim_ids)
    held = await rnd.claims.hosts_held(victim_ids)
    for victim_id in victim_ids:
        record = records.get(victim_id)
        if held.get(victim_id) == kept.host and record is not None and record.hypervisor_id != kept.host:
            return True  # gone from the host in PostgreSQL, the truth; still claimed there in Redis
    await rnd.fleet.reread({kept.host})
    return fits_now(rnd, choice, groups)
