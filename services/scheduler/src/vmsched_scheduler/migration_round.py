"""Choosing and claiming migration targets: the scheduling round's pipeline for VMs that move.

A ``vm.migrate`` names a running VM, its source and, optionally, the host asked for. The round
decides it as it decides a placement (every hard rule of the VM: labels, host selector, taints,
server group, capacity), with two more: its source is excluded, and only a host whose agent can
migrate (and only the one asked for, when one is named) passes the ``migration`` filter. The choice
is claimed in Redis under the VM's *target claim* (its claim on its source stays), then committed
under PostgreSQL's guard (:meth:`~vmsched_scheduler.ports.Ledger.settle_migrations`): from then on
the VM holds both hosts until the migration ends (:mod:`vmsched_domain.live_migration`). A refused claim
sends the VM to the next pass, as for a placement; a VM no host takes goes back to ``running`` with
the reason, nothing claimed.

:meth:`SchedulingRound.run_migrations <vmsched_scheduler.round.SchedulingRound.run_migrations>` is
also the port a drain or a rebalance uses for one VM: give it the VM's ``vm.migrate`` and read the
outcome. Its pass is the round's skeleton with its own claim (the VM's *target claim*) and
settlement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context

from vmsched_contract.messages import VmMigrate, VmMigrating, VmMigrationFailed
from vmsched_contract.status import Task
from vmsched_domain.claims import target_claim_id
from vmsched_domain.live_migration import in_flight
from vmsched_domain.records import VmRecord
from vmsched_placement import NO_AVAILABLE_AGENTS, Fleet, verdict
from vmsched_placement.filters import MigrationFilter
from vmsched_placement.whatif import unplaced_detail
from vmsched_scheduler.groups import RoundGroups
from vmsched_scheduler.ports import Committed, NoTarget, TargetClaim
from vmsched_scheduler.round_items import Choice, Ignored, Later, OpenVm, decision_record
from vmsched_scheduler.tracing import traced_step

if TYPE_CHECKING:
    from vmsched_scheduler.round import SchedulingRound

MIGRATION = MigrationFilter.NAME


@dataclass(frozen=True, slots=True)
class MigrationItem:
    """A migration whose target to choose, and the trace context of the message that asked."""

    request: VmMigrate
    trace: otel_context.Context | None = None


@dataclass(frozen=True, slots=True)
class TargetChosen:
    """A target is claimed and committed: the VM holds both hosts; the target is to prepare."""

    event: VmMigrating
    fresh: bool  # claimed by this round; False: announced again from PostgreSQL (a redelivery)


@dataclass(frozen=True, slots=True)
class NoTargetFound:
    """No host takes the VM: it stays running on its source, nothing claimed."""

    event: VmMigrationFailed
    fresh: bool


MigrationOutcome = TargetChosen | NoTargetFound | Ignored | Later


class Migrations:
    """The pass of migrations: each claims its target beside its source; no target: the VM stays
    on its source with the reason."""

    whole = False

    def __init__(self, scheduling_round: SchedulingRound) -> None:
        self.round = scheduling_round

    def undecided(self) -> MigrationOutcome:
        return Later("not decided")

    def later(self, why: str) -> MigrationOutcome:
        return Later(why)

    def gave_up(self, work: OpenVm) -> MigrationOutcome:
        return Later(f"claims refused on {len(work.refused)} hosts; the snapshot keeps changing")

    async def prepare(self, open_vms: list[OpenVm], outcomes: list[MigrationOutcome]) -> list[OpenVm]:
        return open_vms

    async def revisit(self, choices: list[Choice], fleet: Fleet, groups: RoundGroups) -> list[Choice]:
        return choices

    async def claim(self, choices: list[Choice], fleet: Fleet) -> tuple[list[OpenVm], list[Choice]]:
        return await self.round.claim_each(choices, fleet)

    async def settle(
        self, claimed: list[Choice], nowhere: list[Choice], groups: RoundGroups, outcomes: list[MigrationOutcome]
    ) -> list[OpenVm]:
        if not claimed and not nowhere:
            return []
        rnd = self.round
        targets = [self._target(c) for c in claimed]
        no_targets = [self._no_target(c) for c in nowhere]
        with traced_step("commit", [c.work.item.trace for c in (*claimed, *nowhere)]) as spans:
            settled = await rnd.ledger.settle_migrations(targets, no_targets)
            spans.outcomes([o.value for o in (*settled.targets, *settled.no_targets)])
        again: list[OpenVm] = []
        refused: list[TargetClaim] = []
        check: list[Choice] = []
        for choice, target, committed in zip(claimed, targets, settled.targets, strict=True):
            if committed is Committed.PLACED:
                outcomes[choice.work.index] = TargetChosen(_migrating(choice, target.host_id), True)
            elif committed in (Committed.HOST_REFUSED, Committed.GROUP_REFUSED):
                rnd.refused(choice, target.host_id, "postgres", committed.value)
                refused.append(target)
                again.append(choice.work)
            else:
                check.append(choice)
        if refused:
            await rnd.claims.release_many([target_claim_id(t.vm_id) for t in refused])
            await rnd.fleet.reread({t.host_id for t in refused})
        for choice, no_target, committed in zip(nowhere, no_targets, settled.no_targets, strict=True):
            if committed is Committed.NO_TARGET:
                outcomes[choice.work.index] = NoTargetFound(_failed(choice, no_target), True)
            else:
                check.append(choice)
        if check:
            await self._already_handled(check, outcomes)
        return again

    async def _already_handled(self, choices: list[Choice], outcomes: list[MigrationOutcome]) -> None:
        """Migrations no longer choosing their target: a target committed before is announced again;
        a target claim this round took for nothing is given back."""
        rnd = self.round
        records = await rnd.ledger.load([c.vm.vm_id for c in choices])
        needless = []
        for choice in choices:
            move = choice.work.move
            assert move is not None
            record = records.get(move.vm.vm_id)
            committed = _committed_target(record, move.migration)
            if choice.claimed_now and committed != choice.host_id:
                needless.append(target_claim_id(move.vm.vm_id))
            if committed is not None:
                outcomes[choice.work.index] = TargetChosen(_migrating(choice, committed), False)
            else:
                outcomes[choice.work.index] = Ignored(_why_ignored(record, move.migration))
        if needless:
            await rnd.claims.release_many(needless)
            await rnd.fleet.reread({c.host_id for c in choices if c.claimed_now})

    def _target(self, choice: Choice) -> TargetClaim:
        move = choice.work.move
        assert move is not None
        decision = choice.decision
        score = decision.score if choice.host_id == decision.host_id else None
        return TargetClaim(
            vm_id=move.vm.vm_id,
            migration=move.migration,
            host_id=choice.host_id,
            resources=move.vm.resources,
            record=decision_record(choice, host=choice.host_id, score=score),
            group=choice.group,
        )

    def _no_target(self, choice: Choice) -> NoTarget:
        move = choice.work.move
        assert move is not None
        decision = choice.decision
        reason, detail = decision.reason or NO_AVAILABLE_AGENTS, unplaced_detail(decision)
        if move.target_host is not None:
            # The host asked for: the rule it fails, with its numbers, rather than the fleet's count.
            request = choice.work.request(choice.placement_group, reserve=choice.reserve)
            found = verdict(self.round.fleet.fleet, request, self.round.context(), move.target_host)
            if found is None:
                reason, detail = MIGRATION, f"migration: no host {move.target_host} is known"
            elif found.filter is not None and found.reason is not None:
                reason, detail = found.filter, found.reason
        examples = self.round.rejected_examples(choice)
        record = decision_record(choice, host=None, score=None, reason=reason, detail=detail, examples=examples)
        return NoTarget(move.vm.vm_id, move.migration, reason, detail, record)


def _committed_target(record: VmRecord | None, migration: int) -> str | None:
    """The target PostgreSQL holds for the VM's migration ``migration``, if one is committed."""
    if record is None or not in_flight(record, migration) or record.task is Task.CHOOSING_TARGET:
        return None
    return record.migration_target


def _why_ignored(record: VmRecord | None, migration: int) -> str:
    if record is None:
        return "no such VM"
    if record.migrations != migration:
        return f"stale: the VM is at migration {record.migrations}"
    return f"the migration ended: the VM is {record.status.value}"


def _migrating(choice: Choice, target: str) -> VmMigrating:
    move = choice.work.move
    assert move is not None
    return VmMigrating(
        vm_id=move.vm.vm_id,
        name=move.vm.name,
        resources=move.vm.resources,
        migration=move.migration,
        source=move.source,
        target=target,
    )


def _failed(choice: Choice, no_target: NoTarget) -> VmMigrationFailed:
    move = choice.work.move
    assert move is not None
    return VmMigrationFailed(
        vm_id=move.vm.vm_id,
        migration=move.migration,
        source=move.source,
        target=None,
        reason=no_target.reason,
        detail=no_target.detail,
    )
