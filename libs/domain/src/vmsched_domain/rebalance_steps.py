"""Applying a rebalancing plan (POST /v1/rebalance/plans/{id}/apply): the rules, pure. The gateway's
sweep (``vmsched_pg.rebalance_plans.RebalanceStore.sweep``) reads the plan's VMs, asks :func:`step`
what to do next, starts the migrations it names (each towards the plan's target, as
``POST /v1/vms/{id}/migrate {target_host}``) and records the progress, as a drain does.

Each move, in the plan's order, is queued, then started (at most ``max_parallel`` in flight), then
moved, or skipped with the reason: the VM is no longer where the plan found it, or not running, or the
migration was refused or rolled back. The schedulers check the target against every hard rule on the
live snapshot when the migration is decided: a move the fleet has made invalid since the plan is
refused there (the VM stays where it is, running) and recorded as skipped with the rule's reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vmsched_contract.rebalance import MoveState, PlanState
from vmsched_contract.status import VmStatus
from vmsched_domain import live_migration
from vmsched_domain.records import VmRecord


@dataclass(frozen=True, slots=True)
class PlannedMove:
    vm_id: str
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class MoveProgress:
    state: MoveState
    migration: int | None = None  # the migration's number, once started
    reason: str | None = None  # why it was skipped

    def as_json(self) -> dict[str, object]:
        return {"state": self.state.value, "migration": self.migration, "reason": self.reason}

    @classmethod
    def of(cls, stored: Mapping[str, object]) -> MoveProgress:
        number = stored.get("migration")
        reason = stored.get("reason")
        return cls(
            MoveState(str(stored["state"])),
            int(str(number)) if number is not None else None,
            None if reason is None else str(reason),
        )


@dataclass(frozen=True, slots=True)
class Step:
    """What to do now: the moves to start (at most the free slots), and every move's progress."""

    start: list[PlannedMove]
    progress: dict[str, MoveProgress]
    state: PlanState


def why_not(move: PlannedMove, vm: VmRecord | None) -> str | None:
    """Why ``move`` can no longer be made as planned (None: it can be started)."""
    if vm is None or vm.status is VmStatus.DELETED:
        return "the VM is gone"
    if vm.hypervisor_id != move.source:
        return f"the VM is on {vm.hypervisor_id} now, not {move.source}"
    if vm.status is not VmStatus.RUNNING:
        return f"the VM is {vm.status.value}: only a running VM is moved"
    if vm.task is not None:
        return f"a task is in flight for the VM ({vm.task.value})"
    return None


def step(
    moves: Sequence[PlannedMove],
    progress: Mapping[str, MoveProgress],
    vms: Mapping[str, VmRecord],
    max_parallel: int,
) -> Step:
    """The next step of applying ``moves``, given each move's recorded ``progress`` and the plan's
    VMs as they are now (``vms``, by id; absent: gone)."""
    now: dict[str, MoveProgress] = {}
    in_flight = 0
    for move in moves:
        known = progress.get(move.vm_id, MoveProgress(MoveState.QUEUED))
        if known.state is MoveState.IN_FLIGHT and known.migration is not None:
            known = _ended(move, known.migration, vms.get(move.vm_id))
            in_flight += known.state is MoveState.IN_FLIGHT
        now[move.vm_id] = known
    start: list[PlannedMove] = []
    for move in moves:
        if now[move.vm_id].state is not MoveState.QUEUED or in_flight + len(start) >= max_parallel:
            continue
        reason = why_not(move, vms.get(move.vm_id))
        if reason is not None:
            now[move.vm_id] = MoveProgress(MoveState.SKIPPED, reason=reason)
        else:
            start.append(move)
    pending = in_flight + len(start) + sum(1 for p in now.values() if p.state is MoveState.QUEUED)
    return Step(start, now, PlanState.APPLYING if pending else PlanState.DONE)


def _ended(move: PlannedMove, number: int, vm: VmRecord | None) -> MoveProgress:
    if vm is None:
        return MoveProgress(MoveState.SKIPPED, number, "the VM is gone")
    match live_migration.outcome(vm, number, move.source):
        case live_migration.Outcome.IN_FLIGHT:
            return MoveProgress(MoveState.IN_FLIGHT, number)
        case live_migration.Outcome.MOVED if vm.hypervisor_id == move.target:
            return MoveProgress(MoveState.MOVED, number)
        case live_migration.Outcome.MOVED:
            return MoveProgress(MoveState.SKIPPED, number, f"the VM went to {vm.hypervisor_id}, not {move.target}")
        case _:
            return MoveProgress(MoveState.SKIPPED, number, vm.status_reason or "the migration was rolled back")


def started(move: PlannedMove, vm: VmRecord) -> MoveProgress:
    """A move whose migration was just committed (``vm`` as committed)."""
    return MoveProgress(MoveState.IN_FLIGHT, vm.migrations)


def refused(reason: str) -> MoveProgress:
    return MoveProgress(MoveState.SKIPPED, reason=reason)
