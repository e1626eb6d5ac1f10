"""One scheduling round: decide every VM, claim them all in one Redis call, settle them all in one
PostgreSQL transaction. The same round places one VM or a thousand; there is no other path.

A round works through passes. In each pass:

1. **decide** each VM still open, in memory, against the fleet as last read; a VM's choice is booked
   on that copy at once, so the next VM is decided against what is left;
2. **claim** the chosen hosts in one atomic Redis script (the fit rule checked again, keyed by VM id:
   a VM that already holds a claim from an earlier delivery keeps it);
3. **settle** in PostgreSQL, in one transaction: the placements (each host guarded by the fit rule
   again) and the VMs that fit nowhere.

A claim refused by Redis or by PostgreSQL's guard is a normal answer, not an error: the host is
read again and left out for that VM, and the VM goes into the next pass. A VM still open after
:attr:`RoundSettings.max_passes`, or one that fits nowhere while the snapshot knows fewer hosts
than PostgreSQL (after a Redis flush), comes back as :class:`Later` and its caller tries it again.

Only the protocols of :mod:`vmsched_scheduler.ports` are touched, so a round runs on in-memory
fakes in tests and on Redis and PostgreSQL in production.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from uuid import UUID

from opentelemetry import context as otel_context

from vmsched_contract.decision import Candidate, JournalRef, PlacementRecord, RefusedClaim, RejectedHost
from vmsched_contract.messages import Assignment, Unplaced, VmMigrate, VmToPlace, WaitingVm
from vmsched_contract.status import VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_domain.lifecycle import HOLDS_CAPACITY
from vmsched_domain.records import VmRecord
from vmsched_placement import (
    NO_AVAILABLE_AGENTS,
    Decision,
    DecisionContext,
    Fleet,
    PlacementRequest,
    Weights,
    rejected_examples,
    scheduling_line,
    selected_line,
)
from vmsched_placement.inputs import demand_of, placement_request
from vmsched_placement.journal import PreemptionInputs, seeded
from vmsched_placement.model import Migration, PlacementGroup
from vmsched_placement.preemption import drawn, preemptible_rows
from vmsched_placement.whatif import unplaced_detail
from vmsched_redis.claims import Claim, GroupClaim
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.groups import GroupSource, RoundGroups
from vmsched_scheduler.journal import DecisionJournal
from vmsched_scheduler.metrics import CLAIM_CONFLICTS, DECISION_SECONDS, PLACEMENTS, REQUEST_TO_ASSIGNMENT_SECONDS
from vmsched_scheduler.ports import ClaimStore, Committed, FleetView, Ledger, NoHost, Placement
from vmsched_scheduler.tracing import traced_decide, traced_step

log = get_logger("vmsched_scheduler")

EXCLUDED = "excluded"
ALL_OR_NOTHING = "all_or_nothing"  # the reason of a VM that fits, of a batch another VM of which does not
RESERVATION = "reservation"  # the reason of a VM whose reservation holds no slot for it
# Choices of victims made again when another scheduler took them first.
PREEMPTION_TRIES = 8


@dataclass(frozen=True, slots=True)
class RoundItem:
    """A VM to place, and the trace context of the message that asked (its spans go there)."""

    vm: VmToPlace
    trace: otel_context.Context | None = None


@dataclass(frozen=True, slots=True)
class Assigned:
    assignment: Assignment
    fresh: bool  # placed by this round; False: announced again from PostgreSQL (a redelivery)
    log_lines: tuple[str, ...] = ()  # the seed's "Scheduling VM ..." and "Selected agent ..." lines
    preempted: tuple[VmRecord, ...] = ()  # the VMs whose room it took, as now recorded (preempted)


@dataclass(frozen=True, slots=True)
class NotPlaced:
    unplaced: Unplaced
    fresh: bool


@dataclass(frozen=True, slots=True)
class Waiting:
    """No host fits it yet; it waits for room (its wait_s has not passed)."""

    waiting: WaitingVm
    fresh: bool


@dataclass(frozen=True, slots=True)
class Ignored:
    """Nothing to announce: the VM is gone, deleted, or at another attempt than the message's."""

    why: str


@dataclass(frozen=True, slots=True)
class Later:
    """Not settled in this round; try the VM again in a later one."""

    why: str


Outcome = Assigned | NotPlaced | Waiting | Ignored | Later


@dataclass(frozen=True, slots=True)
class RoundSettings:
    weights: Weights
    offline_timeout: float
    max_passes: int = 4
    fallbacks: int = 4  # hosts ranked after the chosen one, recorded as candidates
    preemption: bool = True  # VMSCHED_PREEMPTION: a VM that fits nowhere may take lower-priority VMs' room


@dataclass(slots=True)
class _Open:
    """A VM not yet settled in this round, and what the round learnt about it so far."""

    index: int
    item: RoundItem
    strategy: Strategy
    avoid: set[str] = field(default_factory=set)  # hosts that refused its claim in this round
    refused: list[RefusedClaim] = field(default_factory=list)
    move: VmMigrate | None = None  # set when choosing a migration's target (vmsched_scheduler.migration_round)

    def always_out(self) -> frozenset[str]:
        """Hosts never tried for it, even when its exclusions are set aside: those that refused its
        claim in this round and, for a migration, its source."""
        return frozenset(self.avoid | ({self.move.source} if self.move is not None else set()))


@dataclass(slots=True)
class _Choice:
    work: _Open
    decision: Decision
    seconds: float
    exclusions_ignored: bool
    host_id: str = ""  # the host the claim holds (the chosen one, or an earlier delivery's)
    claimed_now: bool = False
    group: GroupClaim | None = None  # its server group's rule, as the claim and the commit check it
    # Its server group as the engine saw it when deciding. Kept here, not on the round: a gang's
    # round may run beside a batched one.
    placement_group: PlacementGroup | None = None
    gang_failure: str = ""  # all or nothing: it had a host, but another VM of its batch had none
    journal: JournalRef | None = None  # where its inputs are kept


class SchedulingRound:
    def __init__(
        self,
        fleet: FleetView,
        claims: ClaimStore,
        ledger: Ledger,
        settings: RoundSettings,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        groups: GroupSource | None = None,
        journal: DecisionJournal | None = None,
    ) -> None:
        self.fleet = fleet
        self.claims = claims
        self.ledger = ledger
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.groups = groups
        self.journal = journal

    async def run(self, items: Sequence[RoundItem]) -> list[Outcome]:
        """Settle what can be settled of ``items``; one outcome per item, in order."""
        default = await self.ledger.default_strategy()
        await self.fleet.refresh()
        outcomes: list[Outcome] = [Later("not decided") for _ in items]
        open_vms = [_Open(i, item, item.vm.strategy or default) for i, item in enumerate(items)]
        for _ in range(self.settings.max_passes):
            if not open_vms:
                break
            open_vms = await self._pass(open_vms, outcomes)
        for work in open_vms:
            outcomes[work.index] = Later(f"claims refused on {len(work.refused)} hosts; the snapshot keeps changing")
        return outcomes

    async def _pass(self, open_vms: list[_Open], outcomes: list[Outcome]) -> list[_Open]:
        reserved = [work for work in open_vms if work.item.vm.reservation is not None]
        if reserved:
            open_vms = [work for work in open_vms if work.item.vm.reservation is None]
            for work in reserved:
                await self._take_slot(work, outcomes)
            if not open_vms:
                return []
        groups = await RoundGroups.load(self.groups, (work.item.vm for work in open_vms))
        choices, fleet = await self._decide_all(open_vms, groups)
        choices = await self._without_own_claims(choices, fleet, groups)
        placing = [c for c in choices if c.decision.host_id is not None]
        nowhere = [c for c in choices if c.decision.host_id is None]
        if nowhere and await self._snapshot_behind(nowhere):
            await self.fleet.refresh(force_full=True)
            for choice in nowhere:
                outcomes[choice.work.index] = Later("the snapshot knows fewer hosts than PostgreSQL")
            nowhere = []
        again = await self._claim(placing, fleet)
        claimed = [c for c in placing if c.host_id]
        if self.settings.preemption:
            nowhere = [c for c in nowhere if not await self._preempt(c, groups, outcomes)]
        again += await self._settle(claimed, nowhere, outcomes)
        return again

    async def _snapshot_behind(self, nowhere: list[_Choice]) -> bool:
        """Whether "no host" now would be premature: PostgreSQL knows more online hosts than the
        snapshot holds, or knows some while the snapshot has none online. After a Redis flush the
        snapshot lacks hosts until their next heartbeat, and this copy may still hold hosts the flush
        took (a refused claim drops them one by one: those left can be the dead ones)."""
        online = await self.ledger.online_hosts()
        if len(self.fleet.fleet) < online:
            return True
        none_online = any(c.decision.reason == NO_AVAILABLE_AGENTS and not c.gang_failure for c in nowhere)
        return none_online and online > 0

    def _context(self) -> DecisionContext:
        """What a decision needs from outside the engine, at this instant."""
        return DecisionContext(
            now=self.clock(), offline_timeout=self.settings.offline_timeout, weights=self.settings.weights, rng=self.rng
        )

    # -- 1. decide ------------------------------------------------------------------------------
    async def _decide_all(self, open_vms: list[_Open], groups: RoundGroups) -> tuple[list[_Choice], Fleet]:
        """Every VM decided on the current copy of the fleet, each booked on it before the next is
        decided; the copy is returned with the choices (the claims' bookings belong to it)."""
        context = self._context()
        turns = sum(1 for work in open_vms if work.strategy is Strategy.ROUND_ROBIN)
        cursor = await self.claims.next_round_robin(turns) if turns else 0
        choices = []
        fleet = self.fleet.fleet
        for work in open_vms:
            own = context
            if work.strategy is Strategy.ROUND_ROBIN:
                own, cursor = replace(context, round_robin_cursor=cursor), cursor + 1
            choice = self._decide(work, own, groups)
            if choice.decision.host_id is not None:
                fleet.allocate(choice.decision.host_id, demand_of(work.item.vm.resources))
                groups.book(work.item.vm, fleet, choice.decision.host_id)
            choices.append(choice)
        if self.journal is not None:
            await self.journal.flush([c.journal for c in choices if c.journal is not None])
        return choices, fleet

    async def _without_own_claims(self, choices: list[_Choice], fleet: Fleet, groups: RoundGroups) -> list[_Choice]:
        """A VM no host fits may have been turned away by its own claim: an earlier delivery of its
        message claimed a host and could not commit (PostgreSQL down, say), and the snapshot counts
        that claim. Such VMs are decided again with their own claims taken off the round's copy of
        the fleet; the claim step then binds each to the host its claim holds (outcome ``held``)."""
        nowhere = [c for c in choices if c.decision.host_id is None]
        held = await self.claims.hosts_held([c.work.item.vm.vm_id for c in nowhere]) if nowhere else {}
        if not held:
            return choices
        redo = []
        for choice in nowhere:
            host = held.get(choice.work.item.vm.vm_id)
            if host is not None and host in fleet:
                fleet.release(host, demand_of(choice.work.item.vm.resources))
                redo.append(choice.work)
        decided_again = {c.work.index: c for c in (await self._decide_all(redo, groups))[0]} if redo else {}
        return [decided_again.get(c.work.index, c) for c in choices]

    def _decide(self, work: _Open, context: DecisionContext, groups: RoundGroups) -> _Choice:
        vm = work.item.vm
        placement_group = groups.placement_group(vm)
        request = _placement_request(work, placement_group)
        # Strategy random draws from a seed of its own, kept in the journal: a replay draws the same.
        seed = self.rng.getrandbits(63) if work.strategy is Strategy.RANDOM else None
        context = seeded(context, seed)
        started = time.perf_counter()
        decision = traced_decide(self.fleet.fleet, request, context, work.item.trace, fallbacks=self.settings.fallbacks)
        ignored = False
        if decision.host_id is None and vm.exclude_hosts and EXCLUDED in decision.rejections:
            # Hosts that failed this VM lately are left out only while another host fits.
            alone = traced_decide(
                self.fleet.fleet,
                replace(request, exclude_hosts=work.always_out()),
                seeded(context, seed),
                work.item.trace,
                fallbacks=self.settings.fallbacks,
            )
            if alone.host_id is not None:
                decision, ignored = alone, True
                request = replace(request, exclude_hosts=work.always_out())
        seconds = time.perf_counter() - started
        DECISION_SECONDS.observe(seconds)
        # The fleet is not yet booked with this VM: the journal sees what the engine saw.
        journal = None if self.journal is None else self.journal.note(self.fleet.fleet, request, context, seed)
        group = groups.claim(request, self.fleet.fleet, context) if decision.host_id is not None else None
        return _Choice(work, decision, seconds, ignored, group=group, placement_group=placement_group, journal=journal)

    # -- 2. claim -------------------------------------------------------------------------------
    async def _claim(self, placing: list[_Choice], fleet: Fleet) -> list[_Open]:
        """Claim every chosen host (booked on ``fleet`` when decided); a refused VM is returned to be
        decided again."""
        if not placing:
            return []
        claims = [
            Claim(
                c.work.item.vm.vm_id,
                str(c.decision.host_id),
                c.work.item.vm.resources,
                c.group,
                target=c.work.move is not None,
            )
            for c in placing
        ]
        with traced_step("claim", [c.work.item.trace for c in placing]) as spans:
            claimed = await self.claims.claim_many(claims, self.clock())
            spans.outcomes([result.outcome for result in claimed.results])
        results = claimed.results
        again: list[_Open] = []
        stale: set[str] = set()
        for choice, result in zip(placing, results, strict=True):
            chosen = str(choice.decision.host_id)
            if result.outcome == "claimed":
                choice.host_id, choice.claimed_now = chosen, True
                continue
            # Not booked here after all: undo the local booking; the truth is read again below.
            fleet.release(chosen, demand_of(choice.work.item.vm.resources))
            stale.add(chosen)
            if result.outcome == "held":  # an earlier delivery claimed a host: the VM is bound to it
                choice.host_id = result.detail
                stale.add(result.detail)
                continue
            CLAIM_CONFLICTS.labels("redis").inc()
            choice.work.avoid.add(chosen)
            choice.work.refused.append(
                RefusedClaim(host=chosen, stage="redis", outcome=result.outcome, detail=result.detail)
            )
            again.append(choice.work)
        # Booked on the fleet as decided: the claimed hosts are not read again at the next refresh,
        # unless another process changed them meanwhile.
        self.fleet.booked({host: change for host, change in claimed.changes.items() if host not in stale}, on=fleet)
        await self.fleet.reread(stale)
        return again

    # -- 3. settle ------------------------------------------------------------------------------
    async def _settle(self, claimed: list[_Choice], nowhere: list[_Choice], outcomes: list[Outcome]) -> list[_Open]:
        if not claimed and not nowhere:
            return []
        placements = [self._placement(c) for c in claimed]
        no_hosts = [self._no_host(c) for c in nowhere]
        with traced_step("commit", [c.work.item.trace for c in (*claimed, *nowhere)]) as spans:
            settled = await self.ledger.settle(placements, no_hosts)
            spans.outcomes([r.outcome.value for r in settled.placements] + [o.value for o in settled.no_hosts])
        again: list[_Open] = []
        release: list[Placement] = []
        check: list[_Choice] = []
        for choice, placement, result in zip(claimed, placements, settled.placements, strict=True):
            if result.outcome is Committed.PLACED:
                assert result.scheduled_at is not None
                PLACEMENTS.labels(placement.strategy.value, "scheduled").inc()
                if result.created_at is not None:
                    REQUEST_TO_ASSIGNMENT_SECONDS.observe((result.scheduled_at - result.created_at).total_seconds())
                outcomes[choice.work.index] = Assigned(
                    _assignment(choice.work.item.vm, placement, result.scheduled_at),
                    True,
                    self._log_lines(choice.work.item.vm, placement),
                )
            elif result.outcome in (Committed.HOST_REFUSED, Committed.GROUP_REFUSED):
                CLAIM_CONFLICTS.labels("postgres").inc()
                log.warning("host refused by PostgreSQL's guard; the snapshot was stale", host=placement.host_id)
                choice.work.avoid.add(placement.host_id)
                choice.work.refused.append(
                    RefusedClaim(host=placement.host_id, stage="postgres", outcome=result.outcome.value)
                )
                release.append(placement)
                again.append(choice.work)
            else:
                check.append(choice)
        if release:
            await self.claims.release_many([p.vm_id for p in release])
            await self.fleet.reread({p.host_id for p in release})
        for choice, no_host, committed in zip(nowhere, no_hosts, settled.no_hosts, strict=True):
            if committed is Committed.PLACED:
                PLACEMENTS.labels(no_host.strategy.value, "unschedulable").inc()
                log.warning(f"No host for VM '{choice.work.item.vm.name}': {no_host.reason}", vm_id=str(no_host.vm_id))
                outcomes[choice.work.index] = NotPlaced(_unplaced(choice.work.item.vm, no_host.record), True)
            elif committed is Committed.WAITING:
                PLACEMENTS.labels(no_host.strategy.value, "waiting").inc()
                until = settled.wait_until[no_host.vm_id]
                log.info(f"No host for VM '{choice.work.item.vm.name}' yet; waiting until {until.isoformat()}")
                outcomes[choice.work.index] = Waiting(_waiting(choice.work.item.vm, no_host.record, until), True)
            else:
                check.append(choice)
        if check:
            await self._already_handled(check, outcomes)
        return again

    async def _already_handled(self, choices: list[_Choice], outcomes: list[Outcome]) -> None:
        """VMs no longer pending at the message's attempt: what was decided before is announced again,
        and a claim this round took for nothing is given back."""
        records = await self.ledger.load([c.work.item.vm.vm_id for c in choices])
        needless = []
        for choice in choices:
            vm = choice.work.item.vm
            record = records.get(vm.vm_id)
            holds_here = (
                record is not None and record.hypervisor_id == choice.host_id and record.status in HOLDS_CAPACITY
            )
            if choice.claimed_now and not holds_here:
                needless.append(vm.vm_id)
            outcomes[choice.work.index] = _announced(vm, record)
        if needless:
            await self.claims.release_many(needless)
            await self.fleet.reread({c.host_id for c in choices if c.claimed_now})

    # -- reservations --------------------------------------------------------------------------
    async def _take_slot(self, work: _Open, outcomes: list[Outcome]) -> None:
        """Place a VM naming a reservation in the room one of its held slots keeps (the engine chose
        the slot's host when it placed the reservation): PostgreSQL first, in one transaction (the
        slot becomes ``used``, the VM ``scheduled`` there, the host's allocations trade the slot for
        the VM); then Redis, in one script, the slot's claim becomes the VM's, so that no other VM
        can take the room in between. No slot left: the VM fits nowhere, with the reservation's
        state as the reason."""
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
            taken = await self.ledger.take_slot(placement, vm.reservation, vm.project)
            spans.outcomes([taken.outcome.value])
        if taken.outcome is Committed.SLOT_BUSY:
            outcomes[work.index] = Later("its reservation is not placed yet, or other VMs are taking its slots")
        elif taken.outcome is Committed.NOT_PENDING:
            outcomes[work.index] = _announced(vm, (await self.ledger.load([vm.vm_id])).get(vm.vm_id))
        elif taken.outcome is Committed.NO_SLOT:
            no_host = NoHost(
                vm.vm_id,
                vm.attempt,
                work.strategy,
                f"{RESERVATION}: {taken.why}",
                record.model_copy(update={"reason": RESERVATION, "detail": taken.why}),
            )
            settled = await self.ledger.settle([], [no_host])
            if settled.no_hosts[0] is Committed.PLACED:
                PLACEMENTS.labels(work.strategy.value, "unschedulable").inc()
                log.warning(f"No slot for VM '{vm.name}': {taken.why}", vm_id=str(vm.vm_id))
                outcomes[work.index] = NotPlaced(_unplaced(vm, no_host.record), True)
            elif settled.no_hosts[0] is Committed.WAITING:
                until = settled.wait_until[vm.vm_id]
                outcomes[work.index] = Waiting(_waiting(vm, no_host.record, until), True)
            else:
                outcomes[work.index] = _announced(vm, (await self.ledger.load([vm.vm_id])).get(vm.vm_id))
        else:
            assert taken.slot_id is not None
            assert taken.scheduled_at is not None
            placed = replace(placement, host_id=taken.host_id, record=record.model_copy(update={"host": taken.host_id}))
            swapped = await self.claims.preempt(
                Claim(vm.vm_id, taken.host_id, vm.resources, None), [taken.slot_id], self.clock()
            )
            if not swapped.results[0].holds:
                log.warning(
                    "slot taken but the snapshot refused the swap; the reconcile will restore it",
                    vm_id=str(vm.vm_id),
                    host=taken.host_id,
                    outcome=swapped.results[0].outcome,
                )
            await self.fleet.reread({taken.host_id})
            PLACEMENTS.labels(work.strategy.value, "reserved").inc()
            outcomes[work.index] = Assigned(
                _assignment(vm, placed, taken.scheduled_at), True, self._log_lines(vm, placed)
            )

    # -- preemption ----------------------------------------------------------------------------
    async def _preempt(self, choice: _Choice, groups: RoundGroups, outcomes: list[Outcome]) -> bool:
        """Place a VM that fits nowhere by taking the room of VMs of lower priority on one host (see
        :mod:`~vmsched_placement.preemption`); False when no removal would make room. True
        when its outcome is set: placed, or :class:`Later` when other schedulers kept taking the
        victims it chose first.

        PostgreSQL first, in one transaction: the victims become ``preempted`` and give their room
        back, and the VM is placed under the host's guard. Then Redis, in one script: the victims'
        claims become the VM's. Until then the victims' claims keep the room, so no other VM takes
        it; should the script be refused (the snapshot drifted), the periodic reconcile restores the
        snapshot from PostgreSQL. Another scheduler may take the same victims first: the choice is
        then made again, against what PostgreSQL holds now."""
        vm = choice.work.item.vm
        if vm.priority <= 0 or choice.gang_failure:
            return False
        for _ in range(PREEMPTION_TRIES):
            made = await self._preempt_once(choice, groups, outcomes)
            if made is not None:
                return made
        outcomes[choice.work.index] = Later("preemption: other schedulers kept taking the victims first")
        return True

    async def _preempt_once(self, choice: _Choice, groups: RoundGroups, outcomes: list[Outcome]) -> bool | None:
        """One try of :meth:`_preempt`: True when made, False when nothing can be, None to try again."""
        vm = choice.work.item.vm
        request = _placement_request(choice.work, choice.placement_group)
        # Among equally cheap hosts one is drawn from a seed of its own, kept in the journal.
        seed = self.rng.getrandbits(63)
        context = seeded(self._context(), seed)
        fleet = self.fleet.fleet
        rows = preemptible_rows(fleet, request, context)
        residents = await self.ledger.residents([fleet.host_at(row).id for row in rows], vm.priority)
        # The fleet as it is now (other rounds may have changed it while the residents were read): the
        # hosts chosen among and the journal's entry are both taken from it, with no await between.
        fleet = self.fleet.fleet
        hosts = [fleet.host_at(row) for row in preemptible_rows(fleet, request, context)]
        victims, drawn_among = drawn(hosts, request.demand, vm.priority, residents, seed)
        if victims is None:
            return False
        if self.journal is not None:
            kept = {v.host_id: residents[v.host_id] for v in drawn_among}
            choice.journal = self.journal.note(fleet, request, context, seed, PreemptionInputs(vm.priority, kept))
            await self.journal.flush([choice.journal])
        victim_ids = [UUID(victim.vm_id) for victim in victims.vms]
        choice.host_id = victims.host_id
        group = groups.claim(request, fleet, context)
        placement = replace(self._placement(choice), group=group)
        with traced_step("preempt", [choice.work.item.trace]) as spans:
            result, preempted = await self.ledger.settle_preemption(placement, victim_ids, vm.priority)
            spans.outcomes([result.outcome.value])
        if result.outcome is not Committed.PLACED or result.scheduled_at is None:
            log.info("preemption not made", vm_id=str(vm.vm_id), host=victims.host_id, outcome=result.outcome.value)
            choice.host_id = ""
            await self.fleet.reread({victims.host_id})
            if result.outcome is Committed.NOT_PENDING:
                return False
            CLAIM_CONFLICTS.labels("postgres").inc()
            return None
        claim = Claim(vm.vm_id, victims.host_id, vm.resources, group)
        swapped = await self.claims.preempt(claim, victim_ids, self.clock())
        if not swapped.results[0].holds:
            log.warning(
                "preemption committed but the snapshot refused the swap; the reconcile will restore it",
                vm_id=str(vm.vm_id),
                host=victims.host_id,
                outcome=swapped.results[0].outcome,
            )
        await self.fleet.reread({victims.host_id})
        PLACEMENTS.labels(placement.strategy.value, "preempted").inc()
        log.info(
            f"VM '{vm.name}' (priority {vm.priority}) preempted {len(preempted)} VMs on '{victims.host_id}'",
            vm_id=str(vm.vm_id),
            victims=[str(record.id) for record in preempted],
        )
        outcomes[choice.work.index] = Assigned(
            _assignment(vm, placement, result.scheduled_at, preempted=bool(preempted)),
            True,
            self._log_lines(vm, placement),
            tuple(preempted),
        )
        return True

    # -- all or nothing -------------------------------------------------------------------------
    async def run_gang(self, items: Sequence[RoundItem]) -> list[Outcome]:
        """Place every VM of ``items`` (one all-or-nothing batch) or none: all decided (each booked
        before the next, so members see each other), claimed in one all-or-nothing script call,
        settled in one savepoint undone if PostgreSQL's guard refuses any. A claim or a settlement
        refused is given back whole and the gang decided again; a gang some VM of which fits nowhere
        ends unschedulable, every VM of it. One outcome per item, in order."""
        default = await self.ledger.default_strategy()
        await self.fleet.refresh()
        outcomes: list[Outcome] = [Later("not decided") for _ in items]
        members = [_Open(i, item, item.vm.strategy or default) for i, item in enumerate(items)]
        for _ in range(self.settings.max_passes):
            if await self._gang_pass(members, outcomes):
                return outcomes
        for work in members:
            outcomes[work.index] = Later("all or nothing: claims refused; the snapshot keeps changing")
        return outcomes

    async def _gang_pass(self, members: list[_Open], outcomes: list[Outcome]) -> bool:
        """One try of the whole gang; False when it is to be decided again. Each member is decided as
        in :meth:`run` (selectors, taints, its server group), and its group's rule is checked again
        by the all-or-nothing claim and by the settlement."""
        groups = await RoundGroups.load(self.groups, (work.item.vm for work in members))
        choices, fleet = await self._decide_all(members, groups)
        nowhere = [c for c in choices if c.decision.host_id is None]
        if nowhere:
            for choice in choices:
                if choice.decision.host_id is not None:
                    fleet.release(choice.decision.host_id, demand_of(choice.work.item.vm.resources))
            if len(self.fleet.fleet) < await self.ledger.online_hosts():
                await self.fleet.refresh(force_full=True)
                for choice in choices:
                    outcomes[choice.work.index] = Later("the snapshot knows fewer hosts than PostgreSQL")
                return True
            first = nowhere[0]
            reason = first.decision.reason or NO_AVAILABLE_AGENTS
            why = (
                f"{len(nowhere)} of {len(choices)} VMs of the batch fit nowhere "
                f"({first.work.item.vm.name}: {reason}: {unplaced_detail(first.decision)})"
            )
            for choice in choices:
                if choice.decision.host_id is not None:
                    choice.gang_failure = why
            await self._settle([], choices, outcomes)
            return True
        claims = [
            Claim(c.work.item.vm.vm_id, str(c.decision.host_id), c.work.item.vm.resources, c.group) for c in choices
        ]
        with traced_step("claim", [c.work.item.trace for c in choices]) as spans:
            claimed = await self.claims.claim_many(claims, self.clock(), all_or_nothing=True)
            spans.outcomes([result.outcome for result in claimed.results])
        refused = False
        for choice, claim in zip(choices, claimed.results, strict=True):
            chosen = str(choice.decision.host_id)
            fleet.release(chosen, demand_of(choice.work.item.vm.resources))  # the truth is read again below
            if claim.outcome == "claimed":
                choice.host_id, choice.claimed_now = chosen, True
            elif claim.outcome == "held":
                choice.host_id = claim.detail
            elif claim.outcome != "gang":
                refused = True
                CLAIM_CONFLICTS.labels("redis").inc()
                choice.work.avoid.add(chosen)
                choice.work.refused.append(
                    RefusedClaim(host=chosen, stage="redis", outcome=claim.outcome, detail=claim.detail)
                )
        touched = {str(c.decision.host_id) for c in choices} | {c.host_id for c in choices if c.host_id}
        if refused:
            await self.fleet.reread(touched)
            return False
        placements = [self._placement(c) for c in choices]
        with traced_step("commit", [c.work.item.trace for c in choices]) as spans:
            settled = await self.ledger.settle(placements, [], all_or_nothing=True)
            spans.outcomes([r.outcome.value for r in settled.placements])
        guards = (Committed.HOST_REFUSED, Committed.GROUP_REFUSED)
        if any(r.outcome in (*guards, Committed.GANG_REFUSED) for r in settled.placements):
            for choice, result in zip(choices, settled.placements, strict=True):
                if result.outcome in guards:
                    CLAIM_CONFLICTS.labels("postgres").inc()
                    choice.work.avoid.add(choice.host_id)
                    choice.work.refused.append(
                        RefusedClaim(host=choice.host_id, stage="postgres", outcome=result.outcome.value)
                    )
            await self.claims.release_many([c.work.item.vm.vm_id for c in choices if c.claimed_now])
            await self.fleet.reread(touched)
            return False
        check: list[_Choice] = []
        for choice, placement, result in zip(choices, placements, settled.placements, strict=True):
            if result.outcome is Committed.PLACED and result.scheduled_at is not None:
                PLACEMENTS.labels(placement.strategy.value, "scheduled").inc()
                outcomes[choice.work.index] = Assigned(
                    _assignment(choice.work.item.vm, placement, result.scheduled_at),
                    True,
                    self._log_lines(choice.work.item.vm, placement),
                )
            else:
                check.append(choice)
        await self.fleet.reread(touched)
        if check:
            await self._already_handled(check, outcomes)
        return True

    def _log_lines(self, vm: VmToPlace, placement: Placement) -> tuple[str, ...]:
        host = self.fleet.fleet.host(placement.host_id)  # the VM is booked on it: its use includes the VM
        selected = (
            selected_line(vm.name, host, None)
            if host is not None
            else f"Selected agent '{placement.host_id}' for VM '{vm.name}'"
        )
        return (scheduling_line(vm.name, placement.strategy), selected)

    def _placement(self, choice: _Choice) -> Placement:
        vm = choice.work.item.vm
        decision = choice.decision
        return Placement(
            vm_id=vm.vm_id,
            attempt=vm.attempt,
            host_id=choice.host_id,
            resources=vm.resources,
            strategy=choice.work.strategy,
            record=_record(
                choice, host=choice.host_id, score=decision.score if choice.host_id == decision.host_id else None
            ),
            group=choice.group,
        )

    def _no_host(self, choice: _Choice) -> NoHost:
        vm = choice.work.item.vm
        decision = choice.decision
        detail = choice.gang_failure or unplaced_detail(decision)
        reason = ALL_OR_NOTHING if choice.gang_failure else decision.reason or NO_AVAILABLE_AGENTS
        examples = {}
        if decision.considered and not choice.gang_failure:
            request = _placement_request(choice.work, choice.placement_group)
            context = self._context()
            examples = {
                rule: [RejectedHost(host=host, reason=why) for host, why in found]
                for rule, found in rejected_examples(self.fleet.fleet, request, context).items()
            }
        record = _record(choice, host=None, score=None, reason=reason, detail=detail, examples=examples)
        return NoHost(vm.vm_id, vm.attempt, choice.work.strategy, f"{reason}: {detail}", record)


def _record(
    choice: _Choice,
    *,
    host: str | None,
    score: float | None,
    reason: str | None = None,
    detail: str | None = None,
    examples: dict[str, list[RejectedHost]] | None = None,
) -> PlacementRecord:
    decision = choice.decision
    scores = decision.scores
    return PlacementRecord(
        strategy=choice.work.strategy,
        host=host,
        score=score,
        candidates=[
            Candidate(host=ranked, score=None if scores is None else scores[position])
            for position, ranked in enumerate(decision.ranked)
        ],
        considered=decision.considered,
        eligible=decision.eligible,
        rejections=dict(decision.rejections),
        preferences=dict(decision.preferences),
        preferred=decision.preferred if decision.preferences else None,
        reason=reason,
        detail=detail,
        examples=examples or {},
        refused_claims=list(choice.work.refused),
        exclusions_ignored=choice.exclusions_ignored,
        decided_at=datetime.now(UTC),
        decision_us=round(choice.seconds * 1e6, 1),
        claim_conflicts=len(choice.work.refused),
        journal=choice.journal,
    )


def _placement_request(work: _Open, group: PlacementGroup | None) -> PlacementRequest:
    """What the engine is asked for one open VM: the VM as its message carries it, less the hosts
    this round or its earlier deliveries left out for it (and, for a migration, its source)."""
    move = work.move
    return placement_request(
        work.item.vm,
        work.strategy,
        exclude_hosts=work.always_out(),
        group=group,
        migration=None if move is None else Migration(move.source, move.target_host),
    )


def _assignment(vm: VmToPlace, placement: Placement, scheduled_at: datetime, *, preempted: bool = False) -> Assignment:
    """The VM placed by this round (``preempted``: by taking the room of lower-priority VMs)."""
    return Assignment(
        vm_id=vm.vm_id,
        name=vm.name,
        hypervisor_id=placement.host_id,
        resources=vm.resources,
        strategy=placement.strategy,
        attempt=vm.attempt,
        scheduled_at=scheduled_at,
        project=vm.project,
        preempted=preempted,
    )


def _unplaced(vm: VmToPlace, record: PlacementRecord) -> Unplaced:
    return Unplaced(
        vm_id=vm.vm_id,
        attempt=vm.attempt,
        reason=record.reason or NO_AVAILABLE_AGENTS,
        detail=record.detail or "",
        rejections=dict(record.rejections),
        project=vm.project,
    )


def _waiting(vm: VmToPlace, record: PlacementRecord, until: datetime) -> WaitingVm:
    return WaitingVm(**_unplaced(vm, record).model_dump(), wait_until=until)


def _announced(vm: VmToPlace, record: VmRecord | None) -> Outcome:
    """What to announce again for a VM an earlier delivery settled (same attempt), else nothing."""
    if record is None:
        return Ignored("no such VM")
    if record.attempt != vm.attempt:
        return Ignored(f"stale: the VM is at attempt {record.attempt}")
    PLACEMENTS.labels((record.strategy or Strategy.LEAST_LOADED).value, "duplicate").inc()
    if record.status in HOLDS_CAPACITY and record.hypervisor_id and record.scheduled_at:
        return Assigned(
            Assignment(
                vm_id=vm.vm_id,
                name=vm.name,
                hypervisor_id=record.hypervisor_id,
                resources=vm.resources,
                strategy=record.strategy or Strategy.LEAST_LOADED,
                attempt=vm.attempt,
                scheduled_at=record.scheduled_at,
                project=vm.project,
            ),
            False,
        )
    if record.status is VmStatus.UNSCHEDULABLE and record.placement:
        placement = PlacementRecord.model_validate(record.placement)
        return NotPlaced(_unplaced(vm, placement), False)
    if record.status is VmStatus.WAITING and record.placement and record.wait_until:
        placement = PlacementRecord.model_validate(record.placement)
        return Waiting(_waiting(vm, placement, record.wait_until), False)
    return Ignored(f"the VM is {record.status.value}")
