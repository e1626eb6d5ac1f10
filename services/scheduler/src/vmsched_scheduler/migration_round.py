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

:meth:`MigrationRound.run_migrations` is also the port a drain or a rebalance uses for one VM: give
it the VM's ``vm.migrate`` and read the outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import context as otel_context

from vmsched_contract.decision import RejectedHost
from vmsched_contract.messages import VmMigrate, VmMigrating, VmMigrationFailed
from vmsched_contract.status import Task
from vmsched_domain.claims import target_claim_id
from vmsched_domain.live_migration import in_flight
from vmsched_domain.records import VmRecord
from vmsched_placement import NO_AVAILABLE_AGENTS, DecisionContext, rejected_examples, verdict
from vmsched_placement.filters import MigrationFilter
from vmsched_placement.whatif import unplaced_detail
from vmsched_scheduler.groups import RoundGroups
from vmsched_scheduler.metrics import CLAIM_CONFLICTS
from vmsched_scheduler.ports import Committed, NoTarget, TargetClaim
from vmsched_scheduler.round import (
    Ignored,
    Later,
    RoundItem,
    SchedulingRound,
    _Choice,
    _Open,
    _placement_request,
    _record,
)
from vmsched_scheduler.tracing import traced_step

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


class MigrationRound(SchedulingRound):
    """A scheduling round that also chooses migration targets (with the same fleet copy, claims,
    ledger and server groups)."""

    async def run_migrations(self, items: Sequence[MigrationItem]) -> list[MigrationOutcome]:
        """Choose, claim and commit a target for each migration; one outcome per item, in order."""
        default = await self.ledger.default_strategy()
        await self.fleet.refresh()
        outcomes: list[MigrationOutcome] = [Later("not decided") for _ in items]
        open_moves = [
            _Open(i, RoundItem(item.request.vm, item.trace), item.request.vm.strategy or default, move=item.request)
            for i, item in enumerate(items)
        ]
        for _ in range(self.settings.max_passes):
            if not open_moves:
                break
            open_moves = await self._migration_pass(open_moves, outcomes)
        for work in open_moves:
            outcomes[work.index] = Later(f"claims refused on {len(work.refused)} hosts; the snapshot keeps changing")
        return outcomes

    async def _migration_pass(self, open_moves: list[_Open], outcomes: list[MigrationOutcome]) -> list[_Open]:
        groups = await RoundGroups.load(self.groups, (work.item.vm for work in open_moves))
        choices, fleet = await self._decide_all(open_moves, groups)
        placing = [c for c in choices if c.decision.host_id is not None]
        nowhere = [c for c in choices if c.decision.host_id is None]
        if nowhere and len(self.fleet.fleet) < await self.ledger.online_hosts():
            await self.fleet.refresh(force_full=True)
            for choice in nowhere:
                outcomes[choice.work.index] = Later("the snapshot knows fewer hosts than PostgreSQL")
            nowhere = []
        again = await self._claim(placing, fleet)
        claimed = [c for c in placing if c.host_id]
        again += await self._settle_moves(claimed, nowhere, outcomes)
        return again

    async def _settle_moves(
        self, claimed: list[_Choice], nowhere: list[_Choice], outcomes: list[MigrationOutcome]
    ) -> list[_Open]:
        if not claimed and not nowhere:
            return []
        targets = [self._target(c) for c in claimed]
        no_targets = [self._no_target(c) for c in nowhere]
        with traced_step("commit", [c.work.item.trace for c in (*claimed, *nowhere)]) as spans:
            settled = await self.ledger.settle_migrations(targets, no_targets)
            spans.outcomes([o.value for o in (*settled.targets, *settled.no_targets)])
        again: list[_Open] = []
        refused: list[TargetClaim] = []
        check: list[_Choice] = []
        for choice, target, committed in zip(claimed, targets, settled.targets, strict=True):
            if committed is Committed.PLACED:
                outcomes[choice.work.index] = TargetChosen(_migrating(choice, target.host_id), True)
            elif committed in (Committed.HOST_REFUSED, Committed.GROUP_REFUSED):
                CLAIM_CONFLICTS.labels("postgres").inc()
                choice.work.avoid.add(target.host_id)
                refused.append(target)
                again.append(choice.work)
            else:
                check.append(choice)
        if refused:
            await self.claims.release_many([target_claim_id(t.vm_id) for t in refused])
            await self.fleet.reread({t.host_id for t in refused})
        for choice, no_target, committed in zip(nowhere, no_targets, settled.no_targets, strict=True):
            if committed is Committed.PLACED:
                outcomes[choice.work.index] = NoTargetFound(_failed(choice, no_target), True)
            else:
                check.append(choice)
        if check:
            await self._moves_already_handled(check, outcomes)
        return again

    async def _moves_already_handled(self, choices: list[_Choice], outcomes: list[MigrationOutcome]) -> None:
        """Migrations no longer choosing their target: a target committed before is announced again;
        a target claim this round took for nothing is given back."""
        records = await self.ledger.load([c.work.item.vm.vm_id for c in choices])
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
            await self.claims.release_many(needless)
            await self.fleet.reread({c.host_id for c in choices if c.claimed_now})

    def _target(self, choice: _Choice) -> TargetClaim:
        move = choice.work.move
        assert move is not None
        decision = choice.decision
        return TargetClaim(
            vm_id=move.vm.vm_id,
            migration=move.migration,
            host_id=choice.host_id,
            resources=move.vm.resources,
            record=_record(
                choice, host=choice.host_id, score=decision.score if choice.host_id == decision.host_id else None
            ),
            group=choice.group,
        )

    def _no_target(self, choice: _Choice) -> NoTarget:
        move = choice.work.move
        assert move is not None
        decision = choice.decision
        reason, detail = decision.reason or NO_AVAILABLE_AGENTS, unplaced_detail(decision)
        context = DecisionContext(
            now=self.clock(), offline_timeout=self.settings.offline_timeout, weights=self.settings.weights, rng=self.rng
        )
        request = _placement_request(choice.work, choice.placement_group)
        examples = rejected_examples(self.fleet.fleet, request, context) if decision.considered else {}
        if move.target_host is not None:
            # The host asked for: the rule it fails, with its numbers, rather than the fleet's count.
            found = verdict(self.fleet.fleet, request, context, move.target_host)
            if found is None:
                reason, detail = MIGRATION, f"migration: no host {move.target_host} is known"
            elif found.filter is not None and found.reason is not None:
                reason, detail = found.filter, found.reason
        record = _record(
            choice,
            host=None,
            score=None,
            reason=reason,
            detail=detail,
            examples={rule: [RejectedHost(host=h, reason=why) for h, why in hosts] for rule, hosts in examples.items()},
        )
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


def _migrating(choice: _Choice, target: str) -> VmMigrating:
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


def _failed(choice: _Choice, no_target: NoTarget) -> VmMigrationFailed:
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
