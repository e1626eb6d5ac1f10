"""Draining a host (CloudStack's maintenance mode, ``kubectl drain``): what to do next, and where a
drain stands, from the VMs that hold a share of the host. Pure: no I/O.

A drain pauses its host (nothing new is placed there) and, with ``evacuate``, moves every VM away by
live migration (:mod:`vmsched_domain.live_migration`), at most ``max_parallel`` at once. A VM it cannot
move (no host takes it, a step failed, its host's agent cannot migrate, it is stopped) is *stuck*
with the reason, and tried again after :data:`RETRY_AFTER` while the deadline has not passed. Past
the deadline nothing new starts: the VMs left stay where they are, running, and are listed. Nothing
is ever stopped or deleted by a drain. The host is ``drained`` once no VM holds a share of it (a
reservation's held slot is room, not a VM: nothing moves it, and it stays held there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from vmsched_contract.status import DrainState, VmStatus
from vmsched_domain import live_migration
from vmsched_domain.disruption import Budget
from vmsched_domain.records import VmRecord

# A VM whose migration failed is tried again after this many seconds (the fleet may have made room).
RETRY_AFTER = 15.0


@dataclass(frozen=True, slots=True)
class Drain:
    """A drain as stored: ``started`` maps each VM it moved (or tries to) to its migration's number;
    ``failures`` each VM it could not move to the reason and when (epoch seconds)."""

    host_id: str
    evacuate: bool
    max_parallel: int
    deadline: float  # epoch seconds
    state: DrainState
    started: Mapping[str, int] = field(default_factory=dict)
    failures: Mapping[str, tuple[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Moved:
    vm_id: UUID
    to: str


@dataclass(frozen=True, slots=True)
class Stuck:
    vm_id: UUID
    reason: str


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a drain stands: the VMs it moved away, those moving now, those it cannot move (why), and
    those waiting for a free slot of ``max_parallel``."""

    state: DrainState
    moved: list[Moved]
    in_flight: list[UUID]
    stuck: list[Stuck]
    queued: list[UUID]


@dataclass(frozen=True, slots=True)
class Step:
    """What a sweep does for a drain: start these migrations, record these failures, take this state."""

    start: list[UUID]
    failures: dict[str, tuple[str, float]]
    progress: Progress


def _why_not(vm: VmRecord) -> str | None:
    """Why ``vm``, on the drained host, cannot be migrated away now (None: it can)."""
    if vm.status is VmStatus.STOPPED:
        return "stopped: a drain moves running VMs only; start it or delete it"
    if vm.status is VmStatus.UNKNOWN:
        return "its host is silent: nothing can be moved until its agent is back"
    if vm.status is VmStatus.SCHEDULED:
        return "not running yet: it moves once its agent runs it"
    if vm.status is VmStatus.DELETING:
        return "being deleted"
    if vm.status is VmStatus.RUNNING and vm.task is not None:
        return f"a task is in flight ({vm.task.value}): it moves once that ends"
    if vm.status is not VmStatus.RUNNING:
        return f"{vm.status.value}: only a running VM can be migrated"
    return None


def step(drain: Drain, residents: Sequence[VmRecord], now: float, budgets: Mapping[UUID, Budget] | None = None) -> Step:
    """The next step of ``drain`` given ``residents``: every VM holding a share of its host (as its
    source or as a migration's target), and every VM of ``drain.started`` that still exists,
    wherever it is; and ``budgets``, the disruption budgets of their server groups (those that have
    one). A VM whose group has no budget left is stuck (``disruption_budget``) until a member is
    available again; each migration started takes one unit of its group's budget. A VM to be started
    has its failure forgotten (its next outcome is recorded anew)."""
    failures = dict(drain.failures)
    moved: list[Moved] = []
    in_flight: list[UUID] = []
    for vm in residents:
        number = drain.started.get(str(vm.id))
        if number is None or vm.migrations != number or vm.status in _GONE:
            continue
        match live_migration.outcome(vm, number, drain.host_id):
            case live_migration.Outcome.MOVED:
                moved.append(Moved(vm.id, str(vm.hypervisor_id)))
            case live_migration.Outcome.IN_FLIGHT:
                in_flight.append(vm.id)
            case live_migration.Outcome.ROLLED_BACK if str(vm.id) not in failures:
                failures[str(vm.id)] = (vm.status_reason or "the migration was rolled back", now)
            case _:
                pass
    here = [
        vm for vm in residents if vm.status not in _GONE and drain.host_id in (vm.hypervisor_id, vm.migration_target)
    ]
    if not here:
        return Step([], failures, Progress(DrainState.DRAINED, moved, in_flight, [], []))
    stuck: list[Stuck] = []
    candidates: list[VmRecord] = []
    # Every migration away from the host takes a slot, the drain's own or not (max_parallel bounds the
    # load on the host, whoever asked).
    leaving = sum(1 for vm in here if live_migration.in_flight(vm) and vm.hypervisor_id == drain.host_id)
    for vm in here:
        if vm.id in in_flight:
            continue
        if vm.status is VmStatus.MIGRATING:  # moving here, or away at someone else's request
            stuck.append(Stuck(vm.id, "migrating (not by this drain): it is moved once that migration ends"))
            continue
        why = _why_not(vm)
        failed = failures.get(str(vm.id))
        if why is None and failed is not None and now - failed[1] < RETRY_AFTER:
            why = failed[0]
        if why is None and not drain.evacuate:
            why = "evacuate is false: the drain waits for it to leave"
        if why is not None:
            stuck.append(Stuck(vm.id, why))
        else:
            candidates.append(vm)
    past = now >= drain.deadline
    candidates.sort(key=lambda vm: str(vm.id))
    start: list[UUID] = []
    queued: list[UUID] = []
    if past:
        stuck += [Stuck(vm.id, "the drain's deadline passed: left running here") for vm in candidates]
    else:
        room = max(0, drain.max_parallel - max(leaving, len(in_flight)))
        left = dict(budgets or {})
        for vm in candidates:
            if len(start) >= room:
                queued.append(vm.id)
                continue
            budget = left.get(vm.server_group) if vm.server_group is not None else None
            spent = None if budget is None else budget.refusal()
            if spent is not None:
                stuck.append(Stuck(vm.id, spent))
                continue
            start.append(vm.id)
            if budget is not None and vm.server_group is not None:
                left[vm.server_group] = budget.taken()
    for vm_id in start:
        failures.pop(str(vm_id), None)
    state = DrainState.TIMED_OUT if past and not in_flight else DrainState.DRAINING
    return Step(start, failures, Progress(state, moved, in_flight, stuck, queued))


# Statuses of a VM that holds no share any more: nothing to move, nothing to report.
_GONE = frozenset({VmStatus.DELETED, VmStatus.FAILED, VmStatus.PREEMPTED, VmStatus.UNSCHEDULABLE})
