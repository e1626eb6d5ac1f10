"""One scheduling round: decide every VM, claim them all in one Redis call, settle them all in one
PostgreSQL transaction. The same round places one VM or a thousand.

A round works through passes, and every kind of pass runs one skeleton (:meth:`SchedulingRound.run_pass`):

1. **decide** each VM still open, in memory, against the fleet as last read; a VM's choice is booked
   on that copy at once, so the next VM is decided against what is left;
2. **claim** the chosen hosts in one atomic Redis script (the fit rule checked again, keyed by VM id:
   a VM that already holds a claim from an earlier delivery keeps it);
3. **guard** the VMs that fit nowhere before anything says so (:mod:`~vmsched_scheduler.nowhere_guard`):
   after a Redis flush the snapshot may know fewer hosts than PostgreSQL (the VMs come back
   :class:`Later`), and the copy may be behind the snapshot (an operator's PATCH a moment ago): it is
   read again at once, and a VM decided again if what rejected it is gone (a batch: if it fits whole now);
4. **settle** in PostgreSQL, in one transaction: the placements (each host guarded by the fit rule
   again) and the VMs that fit nowhere.

The kinds of pass differ only where they must (:class:`PassKind`): placements (here) also take reservations'
slots (:mod:`~vmsched_scheduler.reservation_slots`) and preempt (:mod:`~vmsched_scheduler.preemption`); an
all-or-nothing batch claims and settles whole (:mod:`~vmsched_scheduler.gangs`); a migration claims its target
beside its source (:mod:`~vmsched_scheduler.migration_round`).

A claim refused by Redis or by PostgreSQL's guard is a normal answer, not an error: the host is left
out for that VM, which goes into the next pass; still open after the last, it comes back :class:`Later`.

Only the protocols of :mod:`vmsched_scheduler.ports` are touched, so a round runs on in-memory
fakes in tests and on Redis and PostgreSQL in production.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from vmsched_contract.decision import RefusedClaim, RejectedHost
from vmsched_contract.messages import VmToPlace
from vmsched_contract.strategy import Strategy
from vmsched_domain.lifecycle import HOLDS_CAPACITY
from vmsched_placement import (
    NO_AVAILABLE_AGENTS,
    DecisionContext,
    Fleet,
    rejected_examples,
    scheduling_line,
    selected_line,
)
from vmsched_placement.inputs import demand_of
from vmsched_placement.journal import seeded
from vmsched_placement.whatif import unplaced_detail
from vmsched_redis.claims import Claim
from vmsched_runtime.logs import get_logger
from vmsched_scheduler import gangs, migration_round, nowhere_guard, preemption, reservation_slots
from vmsched_scheduler.evictions import Evictions
from vmsched_scheduler.groups import GroupSource, RoundGroups, concentrated
from vmsched_scheduler.journal import DecisionJournal
from vmsched_scheduler.metrics import CLAIM_CONFLICTS, DECISION_SECONDS, PLACEMENTS, REQUEST_TO_ASSIGNMENT_SECONDS
from vmsched_scheduler.nowhere_guard import Premature
from vmsched_scheduler.ports import ClaimStore, Committed, FleetView, Ledger, NoHost, Placement
from vmsched_scheduler.reserve import ReserveSource, RoundReserve
from vmsched_scheduler.round_items import (
    Assigned,
    Choice,
    Later,
    NotPlaced,
    OpenVm,
    Outcome,
    RoundItem,
    RoundSettings,
    Waiting,
    announced,
    assignment_of,
    decision_record,
    opened,
    unplaced_of,
    waiting_of,
)
from vmsched_scheduler.tracing import traced_decide, traced_step

log = get_logger("vmsched_scheduler")

EXCLUDED = "excluded"
ALL_OR_NOTHING = "all_or_nothing"  # the reason of a VM that fits, of a batch another VM of which does not

O = TypeVar("O")  # noqa: E741 - the outcome a kind of pass gives each VM


class PassKind(Protocol[O]):
    """What one kind of pass does that the others do not; :meth:`SchedulingRound.run_pass` does
    the rest. ``whole``: the pass is all or nothing (the guard's verdict then holds for every VM)."""

    whole: bool

    def undecided(self) -> O:
        """A VM's outcome before anything is decided of it (:class:`Later`)."""
        ...

    def later(self, why: str) -> O:
        """A VM to try again in a later round, and why (:class:`Later`)."""
        ...

    def gave_up(self, work: OpenVm) -> O:
        """A VM still open after the last pass (:class:`Later`, saying why)."""
        ...

    async def prepare(self, open_vms: list[OpenVm], outcomes: list[O]) -> list[OpenVm]:
        """The VMs still to decide (a kind may settle some without deciding)."""
        ...

    async def revisit(self, choices: list[Choice], fleet: Fleet, groups: RoundGroups) -> list[Choice]:
        """The decisions, some perhaps made again."""
        ...

    async def claim(self, choices: list[Choice], fleet: Fleet) -> tuple[list[OpenVm], list[Choice]]:
        """(the VMs to decide again, the choices whose claim holds)."""
        ...

    async def settle(
        self, claimed: list[Choice], nowhere: list[Choice], groups: RoundGroups, outcomes: list[O]
    ) -> list[OpenVm]:
        """Commit; the VMs to decide again."""
        ...


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
        reserve: ReserveSource | None = None,
        evictions: Evictions | None = None,
    ) -> None:
        self.fleet = fleet
        self.claims = claims
        self.ledger = ledger
        self.settings = settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.groups = groups
        self.journal = journal
        self.reserve = reserve
        self.evictions = evictions  # preemption that moves its victims (None: victims are deleted)

    # -- the entry points ------------------------------------------------------------------------
    async def run(self, items: Sequence[RoundItem]) -> list[Outcome]:
        """Settle what can be settled of ``items``; one outcome per item, in order."""
        return await self.run_passes(await self.open(items), Placements(self))

    async def run_gang(self, items: Sequence[RoundItem]) -> list[Outcome]:
        """Place every VM of ``items`` (one all-or-nothing batch) or none (:mod:`~vmsched_scheduler.gangs`)."""
        return await self.run_passes(await self.open(items), gangs.Gang(self))

    async def run_migrations(
        self, items: Sequence[migration_round.MigrationItem]
    ) -> list[migration_round.MigrationOutcome]:
        """Choose, claim and commit a target for each migration (:mod:`~vmsched_scheduler.migration_round`)."""
        open_vms = await self.open([RoundItem(item.request.vm, item.trace) for item in items])
        for work, item in zip(open_vms, items, strict=True):
            work.move = item.request
        return await self.run_passes(open_vms, migration_round.Migrations(self))

    async def open(self, items: Sequence[RoundItem]) -> list[OpenVm]:
        return opened(items, await self.ledger.default_strategy(), self.settings.exclude_cluster_after)

    async def run_passes(self, open_vms: list[OpenVm], kind: PassKind[O]) -> list[O]:
        """Pass after pass of ``kind`` until every VM is settled, or :attr:`RoundSettings.max_passes`."""
        await self.fleet.refresh()
        outcomes: list[O] = [kind.undecided() for _ in open_vms]
        for _ in range(self.settings.max_passes):
            if not open_vms:
                break
            open_vms = await self.run_pass(open_vms, outcomes, kind)
        for work in open_vms:
            outcomes[work.index] = kind.gave_up(work)
        return outcomes

    async def run_pass(self, open_vms: list[OpenVm], outcomes: list[O], kind: PassKind[O]) -> list[OpenVm]:
        """One pass of ``kind``: decide, claim, guard what fits nowhere, settle. The VMs to decide again."""
        open_vms = await kind.prepare(open_vms, outcomes)
        if not open_vms:
            return []
        vms = [work.item.vm for work in open_vms]
        groups = await RoundGroups.load(
            self.groups, vms, projects=concentrated(open_vms), reserve=await RoundReserve.load(self.reserve)
        )
        choices, fleet = await self.decide_all(open_vms, groups)
        choices = await kind.revisit(choices, fleet, groups)
        again, claimed = await kind.claim(choices, fleet)
        nowhere = [c for c in choices if c.decision.host_id is None]
        premature = await self.premature_nowhere(nowhere, members=choices if kind.whole else None)
        if premature is not None:
            deferred = choices if kind.whole else nowhere
            if premature.later:
                for choice in deferred:
                    outcomes[choice.work.index] = kind.later(premature.why)
            else:
                again += [choice.work for choice in deferred]
            if kind.whole:
                return again
            nowhere = []
        return again + await kind.settle(claimed, nowhere, groups, outcomes)

    # -- the guard -------------------------------------------------------------------------------
    async def premature_nowhere(
        self, nowhere: list[Choice], *, members: list[Choice] | None = None
    ) -> Premature | None:
        """Whether saying that ``nowhere`` fit nowhere would be premature (:mod:`~vmsched_scheduler.nowhere_guard`)."""
        return await nowhere_guard.premature_nowhere(self, nowhere, members=members)

    def context(self) -> DecisionContext:
        """What a decision needs from outside the engine, at this instant: the one place it is built."""
        return DecisionContext(
            now=self.clock(), offline_timeout=self.settings.offline_timeout, weights=self.settings.weights, rng=self.rng
        )

    # -- 1. decide -------------------------------------------------------------------------------
    async def decide_all(self, open_vms: list[OpenVm], groups: RoundGroups) -> tuple[list[Choice], Fleet]:
        """Every VM decided on the current copy of the fleet, each booked on it before the next is
        decided; the copy is returned with the choices (the claims' bookings belong to it)."""
        context = self.context()
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
                fleet.allocate(choice.decision.host_id, demand_of(work.item.vm.resources), choice.pool_gb)
                groups.book(work.item.vm, fleet, choice.decision.host_id)
                if groups.reserve is not None and work.move is None:
                    groups.reserve.book(fleet, choice.decision.host_id, demand_of(work.item.vm.resources).as_tuple())
            choices.append(choice)
        if self.journal is not None:
            await self.journal.flush([c.journal for c in choices if c.journal is not None])
        return choices, fleet

    def _decide(self, work: OpenVm, context: DecisionContext, groups: RoundGroups) -> Choice:
        vm = work.item.vm
        placement_group = groups.placement_group(vm)
        reserve = groups.reserve.failover() if groups.reserve is not None and work.move is None else None
        request = work.request(placement_group, groups.project_pods(work), reserve)
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
        return Choice(
            work,
            decision,
            seconds,
            ignored,
            group=group,
            placement_group=placement_group,
            reserve=reserve,
            journal=journal,
        )

    # -- 2. claim, one VM at a time --------------------------------------------------------------
    async def claim_each(self, choices: list[Choice], fleet: Fleet) -> tuple[list[OpenVm], list[Choice]]:
        """Claim every chosen host (booked on ``fleet`` when decided), VM by VM; a refused VM is decided again."""
        placing = [c for c in choices if c.decision.host_id is not None]
        if not placing:
            return [], []
        claims = [
            Claim(c.vm.vm_id, str(c.decision.host_id), c.vm.resources, c.group, c.work.move is not None, c.pools)
            for c in placing
        ]
        with traced_step("claim", [c.work.item.trace for c in placing]) as spans:
            claimed = await self.claims.claim_many(claims, self.clock())
            spans.outcomes([result.outcome for result in claimed.results])
        again: list[OpenVm] = []
        stale: set[str] = set()
        for choice, result in zip(placing, claimed.results, strict=True):
            chosen = str(choice.decision.host_id)
            if result.outcome == "claimed":
                choice.host_id, choice.claimed_now = chosen, True
                continue
            # Not booked here after all: undo the local booking; the truth is read again below.
            stale.add(chosen)
            fleet.release(chosen, demand_of(choice.vm.resources), choice.pool_gb)
            if result.outcome == "held":  # an earlier delivery claimed a host: the VM is bound to it
                choice.host_id = result.detail
                stale.add(result.detail)
                continue
            self.refused(choice, chosen, "redis", result.outcome, result.detail)
            again.append(choice.work)
        # Booked on the fleet as decided: the claimed hosts are not read again at the next refresh,
        # unless another process changed them meanwhile.
        self.fleet.booked({host: change for host, change in claimed.changes.items() if host not in stale}, on=fleet)
        await self.fleet.reread(stale)
        return again, [c for c in placing if c.host_id]

    def refused(self, choice: Choice, host: str, stage: str, outcome: str, detail: str = "") -> None:
        """A claim refused (by Redis, or by PostgreSQL's guard): the host is left out for the VM."""
        CLAIM_CONFLICTS.labels(stage).inc()
        if stage == "postgres":
            log.warning("host refused by PostgreSQL's guard; the snapshot was stale", host=host)
        choice.work.avoid.add(host)
        choice.work.refused.append(RefusedClaim(host=host, stage=stage, outcome=outcome, detail=detail))

    # -- 3. settle -------------------------------------------------------------------------------
    async def settle(self, claimed: list[Choice], nowhere: list[Choice], outcomes: list[Outcome]) -> list[OpenVm]:
        """Placements and VMs that fit nowhere, in one transaction; the VMs to decide again."""
        if not claimed and not nowhere:
            return []
        placements = [self.placement_of(c) for c in claimed]
        no_hosts = [self.no_host_of(c) for c in nowhere]
        with traced_step("commit", [c.work.item.trace for c in (*claimed, *nowhere)]) as spans:
            settled = await self.ledger.settle(placements, no_hosts)
            spans.outcomes([r.outcome.value for r in settled.placements] + [o.value for o in settled.no_hosts])
        again: list[OpenVm] = []
        release: list[Placement] = []
        check: list[Choice] = []
        for choice, placement, result in zip(claimed, placements, settled.placements, strict=True):
            if result.outcome is Committed.PLACED and result.scheduled_at is not None:
                PLACEMENTS.labels(placement.strategy.value, "scheduled").inc()
                if result.created_at is not None:
                    REQUEST_TO_ASSIGNMENT_SECONDS.observe((result.scheduled_at - result.created_at).total_seconds())
                outcomes[choice.work.index] = Assigned(
                    assignment_of(choice.vm, placement, result.scheduled_at), True, self.log_lines(choice.vm, placement)
                )
            elif result.outcome in (Committed.HOST_REFUSED, Committed.GROUP_REFUSED, Committed.RESERVE_REFUSED):
                self.refused(choice, placement.host_id, "postgres", result.outcome.value)
                release.append(placement)
                again.append(choice.work)
            else:
                check.append(choice)
        if release:
            await self.claims.release_many([p.vm_id for p in release])
            await self.fleet.reread({p.host_id for p in release})
        for choice, no_host, committed in zip(nowhere, no_hosts, settled.no_hosts, strict=True):
            if committed is Committed.UNSCHEDULABLE:
                PLACEMENTS.labels(no_host.strategy.value, "unschedulable").inc()
                log.warning(f"No host for VM '{choice.vm.name}': {no_host.reason}", vm_id=str(no_host.vm_id))
                outcomes[choice.work.index] = NotPlaced(unplaced_of(choice.vm, no_host.record), True)
            elif committed is Committed.WAITING:
                PLACEMENTS.labels(no_host.strategy.value, "waiting").inc()
                until = settled.wait_until[no_host.vm_id]
                log.info(f"No host for VM '{choice.vm.name}' yet; waiting until {until.isoformat()}")
                outcomes[choice.work.index] = Waiting(waiting_of(choice.vm, no_host.record, until), True)
            else:
                check.append(choice)
        if check:
            await self.already_handled(check, outcomes)
        return again

    async def already_handled(self, choices: list[Choice], outcomes: list[Outcome]) -> None:
        """VMs no longer pending at the message's attempt: what was decided before is announced again,
        and a claim this round took for nothing is given back."""
        records = await self.ledger.load([c.vm.vm_id for c in choices])
        needless = []
        for choice in choices:
            record = records.get(choice.vm.vm_id)
            holds_here = (
                record is not None and record.hypervisor_id == choice.host_id and record.status in HOLDS_CAPACITY
            )
            if choice.claimed_now and not holds_here:
                needless.append(choice.vm.vm_id)
            outcomes[choice.work.index] = announced(choice.vm, record)
        if needless:
            await self.claims.release_many(needless)
            await self.fleet.reread({c.host_id for c in choices if c.claimed_now})

    # -- what the round records ------------------------------------------------------------------
    def log_lines(self, vm: VmToPlace, placement: Placement) -> tuple[str, ...]:
        host = self.fleet.fleet.host(placement.host_id)  # the VM is booked on it: its use includes the VM
        selected = (
            selected_line(vm.name, host, None)
            if host is not None
            else f"Selected agent '{placement.host_id}' for VM '{vm.name}'"
        )
        return (scheduling_line(vm.name, placement.strategy), selected)

    def placement_of(self, choice: Choice) -> Placement:
        decision = choice.decision
        score = decision.score if choice.host_id == decision.host_id else None
        return Placement(
            vm_id=choice.vm.vm_id,
            attempt=choice.vm.attempt,
            host_id=choice.host_id,
            resources=choice.vm.resources,
            strategy=choice.work.strategy,
            record=decision_record(choice, host=choice.host_id, score=score),
            group=choice.group,
            storage=choice.storage,
        )

    def rejected_examples(self, choice: Choice) -> dict[str, list[RejectedHost]]:
        """A few hosts each rule rejected for the VM, with the numbers (as the fleet is now)."""
        if not choice.decision.considered:
            return {}
        found = rejected_examples(
            self.fleet.fleet, choice.work.request(choice.placement_group, reserve=choice.reserve), self.context()
        )
        return {rule: [RejectedHost(host=host, reason=why) for host, why in hosts] for rule, hosts in found.items()}

    def no_host_of(self, choice: Choice) -> NoHost:
        decision = choice.decision
        detail = choice.gang_failure or unplaced_detail(decision)
        reason = ALL_OR_NOTHING if choice.gang_failure else decision.reason or NO_AVAILABLE_AGENTS
        examples = {} if choice.gang_failure else self.rejected_examples(choice)
        record = decision_record(choice, host=None, score=None, reason=reason, detail=detail, examples=examples)
        return NoHost(choice.vm.vm_id, choice.vm.attempt, choice.work.strategy, f"{reason}: {detail}", record)


class Placements:
    """The pass of VMs placed one by one: those naming a reservation take one of its slots, the rest
    are decided; a VM whose own earlier claim turned it away is decided again without it; one that
    fits nowhere may preempt."""

    whole = False

    def __init__(self, scheduling_round: SchedulingRound) -> None:
        self.round = scheduling_round

    def undecided(self) -> Outcome:
        return Later("not decided")

    def later(self, why: str) -> Outcome:
        return Later(why)

    def gave_up(self, work: OpenVm) -> Outcome:
        return Later(f"claims refused on {len(work.refused)} hosts; the snapshot keeps changing")

    async def prepare(self, open_vms: list[OpenVm], outcomes: list[Outcome]) -> list[OpenVm]:
        for work in open_vms:
            if work.item.vm.reservation is not None:
                outcomes[work.index] = await reservation_slots.take_slot(self.round, work)
        return [work for work in open_vms if work.item.vm.reservation is None]

    async def revisit(self, choices: list[Choice], fleet: Fleet, groups: RoundGroups) -> list[Choice]:
        """A VM no host fits may have been turned away by its own claim: an earlier delivery of its
        message claimed a host and could not commit (PostgreSQL down, say), and the snapshot counts
        that claim. Such VMs are decided again with their own claims taken off the round's copy of
        the fleet; the claim step then binds each to the host its claim holds (outcome ``held``)."""
        nowhere = [c for c in choices if c.decision.host_id is None]
        held = await self.round.claims.hosts_held([c.vm.vm_id for c in nowhere]) if nowhere else {}
        if not held:
            return choices
        redo = []
        for choice in nowhere:
            host = held.get(choice.vm.vm_id)
            if host is not None and host in fleet:
                fleet.release(host, demand_of(choice.vm.resources))
                redo.append(choice.work)
        decided_again = {c.work.index: c for c in (await self.round.decide_all(redo, groups))[0]} if redo else {}
        return [decided_again.get(c.work.index, c) for c in choices]

    async def claim(self, choices: list[Choice], fleet: Fleet) -> tuple[list[OpenVm], list[Choice]]:
        return await self.round.claim_each(choices, fleet)

    async def settle(
        self, claimed: list[Choice], nowhere: list[Choice], groups: RoundGroups, outcomes: list[Outcome]
    ) -> list[OpenVm]:
        if self.round.settings.preemption:
            nowhere = [c for c in nowhere if not await preemption.preempt(self.round, c, groups, outcomes)]
        return await self.round.settle(claimed, nowhere, outcomes)
