"""An all-or-nothing batch (``POST /v1/vms/batch`` with ``all_or_nothing``, a reservation's slots):
every VM placed, or none, in a round of its own.

Its pass is the round's skeleton (:meth:`~vmsched_scheduler.round.SchedulingRound.run_pass`) with
three differences: the members are claimed in one all-or-nothing script call; they are settled in
one savepoint undone if PostgreSQL's guard refuses any; and a gang some VM of which fits nowhere
ends unschedulable, every VM of it (once the guard has ruled out a stale view). A claim or a
settlement refused is given back whole and the gang decided again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vmsched_placement import NO_AVAILABLE_AGENTS, Fleet
from vmsched_placement.inputs import demand_of
from vmsched_placement.whatif import unplaced_detail
from vmsched_redis.claims import Claim
from vmsched_scheduler.groups import RoundGroups
from vmsched_scheduler.metrics import PLACEMENTS
from vmsched_scheduler.ports import Committed
from vmsched_scheduler.round_items import Assigned, Choice, Later, OpenVm, Outcome, assignment_of
from vmsched_scheduler.tracing import traced_step

if TYPE_CHECKING:
    from vmsched_scheduler.round import SchedulingRound

GUARDS = (Committed.HOST_REFUSED, Committed.GROUP_REFUSED, Committed.RESERVE_REFUSED)


class Gang:
    whole = True

    def __init__(self, scheduling_round: SchedulingRound) -> None:
        self.round = scheduling_round
        self.members: list[Choice] = []  # this pass's choices, every member's

    def undecided(self) -> Outcome:
        return Later("not decided")

    def later(self, why: str) -> Outcome:
        return Later(why)

    def gave_up(self, work: OpenVm) -> Outcome:
        return Later("all or nothing: claims refused; the snapshot keeps changing")

    async def prepare(self, open_vms: list[OpenVm], outcomes: list[Outcome]) -> list[OpenVm]:
        return open_vms

    async def revisit(self, choices: list[Choice], fleet: Fleet, groups: RoundGroups) -> list[Choice]:
        return choices

    async def claim(self, choices: list[Choice], fleet: Fleet) -> tuple[list[OpenVm], list[Choice]]:
        """Nothing when a member fits nowhere (its bookings given back); else every member in one
        all-or-nothing call: one refused, and the gang is decided again."""
        self.members = choices
        if any(c.decision.host_id is None for c in choices):
            for choice in choices:
                if choice.decision.host_id is not None:
                    fleet.release(choice.decision.host_id, demand_of(choice.vm.resources), choice.pool_gb)
            return [], []
        claims = [Claim(c.vm.vm_id, str(c.decision.host_id), c.vm.resources, c.group, pools=c.pools) for c in choices]
        with traced_step("claim", [c.work.item.trace for c in choices]) as spans:
            claimed = await self.round.claims.claim_many(claims, self.round.clock(), all_or_nothing=True)
            spans.outcomes([result.outcome for result in claimed.results])
        refused = False
        for choice, claim in zip(choices, claimed.results, strict=True):
            chosen = str(choice.decision.host_id)
            fleet.release(chosen, demand_of(choice.vm.resources), choice.pool_gb)  # the truth is read again below
            if claim.outcome == "claimed":
                choice.host_id, choice.claimed_now = chosen, True
            elif claim.outcome == "held":
                choice.host_id = claim.detail
            elif claim.outcome != "gang":
                refused = True
                self.round.refused(choice, chosen, "redis", claim.outcome, claim.detail)
        if refused:
            await self.round.fleet.reread(self._touched())
            return [c.work for c in choices], []
        return [], choices

    async def settle(
        self, claimed: list[Choice], nowhere: list[Choice], groups: RoundGroups, outcomes: list[Outcome]
    ) -> list[OpenVm]:
        if nowhere:
            first = nowhere[0]
            reason = first.decision.reason or NO_AVAILABLE_AGENTS
            why = (
                f"{len(nowhere)} of {len(self.members)} VMs of the batch fit nowhere "
                f"({first.vm.name}: {reason}: {unplaced_detail(first.decision)})"
            )
            for choice in self.members:
                if choice.decision.host_id is not None:
                    choice.gang_failure = why
            await self.round.settle([], self.members, outcomes)
            return []
        if not claimed:
            return []
        rnd = self.round
        placements = [rnd.placement_of(c) for c in claimed]
        with traced_step("commit", [c.work.item.trace for c in claimed]) as spans:
            settled = await rnd.ledger.settle(placements, [], all_or_nothing=True)
            spans.outcomes([r.outcome.value for r in settled.placements])
        if any(r.outcome in (*GUARDS, Committed.GANG_REFUSED) for r in settled.placements):
            for choice, result in zip(claimed, settled.placements, strict=True):
                if result.outcome in GUARDS:
                    rnd.refused(choice, choice.host_id, "postgres", result.outcome.value)
            await rnd.claims.release_many([c.vm.vm_id for c in claimed if c.claimed_now])
            await rnd.fleet.reread(self._touched())
            return [c.work for c in claimed]
        check: list[Choice] = []
        for choice, placement, result in zip(claimed, placements, settled.placements, strict=True):
            if result.outcome is Committed.PLACED and result.scheduled_at is not None:
                PLACEMENTS.labels(placement.strategy.value, "scheduled").inc()
                outcomes[choice.work.index] = Assigned(
                    assignment_of(choice.vm, placement, result.scheduled_at), True, rnd.log_lines(choice.vm, placement)
                )
            else:
                check.append(choice)
        await rnd.fleet.reread(self._touched())
        if check:
            await rnd.already_handled(check, outcomes)
        return []

    def _touched(self) -> set[str]:
        return {str(c.decision.host_id) for c in self.members} | {c.host_id for c in self.members if c.host_id}
