"""A migration's steps, as pure functions: which agent report moves it on, what each step changes of
the VM and which commands follow. Modelled on Nova's live migration and libvirt's migration protocol
(prepare on the target, perform on the source, finish on the target, confirm on the source)::

    running --migrate_requested--> migrating, task choosing_target     (vm.migrate to the schedulers)
      --target_claimed--> task preparing       prepare_migration -> target   (vm.migrating)
      --agent_prepared--> task handing_over    migrate           -> source
      --agent_handed_over--> task finishing    finish_migration  -> target
      --target_running--> running on the target; cleanup_migration -> source (vm.migrated)

The target's capacity is claimed (Redis, then PostgreSQL's guard) before anything moves, and the
source's given back only once the target reports the VM running: in flight, the VM holds both. A
step that fails, or a migration in flight longer than ``VMSCHED_MIGRATION_TIMEOUT``, rolls back: the
VM stays ``running`` on its source, the target's share is given back, the target is told to abort
(drop what it prepared or took) and, once the source was told to hand over, the source to roll back
(keep or resume the VM: task ``rolling_back`` until it reports the VM running, its command sent again
meanwhile; if it cannot, the VM failed); ``vm.migration_failed`` says why. A migration one of whose
hosts is fenced is called off at once (:func:`host_fenced`): rolled back when its target is, rolled
back and failed with the source's other VMs when its source is.

Every function returns None when the report or the request does not apply to the VM as it is (a
late, repeated or stale report, another migration's): the caller then changes nothing. The stores
lock the row, call one of these and write the change with :func:`vmsched_pg.vm_writes.apply`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from uuid import UUID

from vmsched_contract.messages import (
    AgentCommand,
    CommandAction,
    MigrationOrder,
    ReportedStatus,
    Resources,
    VmMigrate,
    VmStatusReport,
)
from vmsched_contract.status import Task, VmStatus
from vmsched_domain import vm_changes
from vmsched_domain.agent_commands import agent_command
from vmsched_domain.lifecycle import Condition, Event, choose
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import Change, with_history

# The reason vm.migration_failed gives for a migration in flight too long.
TIMEOUT = "timeout"
# The reasons it gives for a migration called off because one of its hosts was fenced.
TARGET_FENCED = "target_fenced"
SOURCE_FENCED = "source_fenced"


@dataclass(frozen=True, slots=True)
class Expected:
    """The report a migration's task waits for: from its ``target`` (else its source), answering
    ``action`` with ``success``, which moves it on to ``then`` (None: the migration is done)."""

    target: bool
    action: CommandAction
    success: ReportedStatus
    then: Task | None


# Each task of a migrating VM with a target, and the report that ends it.
EXPECTED: dict[Task, Expected] = {
    Task.PREPARING: Expected(True, CommandAction.PREPARE_MIGRATION, ReportedStatus.PREPARED, Task.HANDING_OVER),
    Task.HANDING_OVER: Expected(False, CommandAction.MIGRATE, ReportedStatus.HANDED_OVER, Task.FINISHING),
    Task.FINISHING: Expected(True, CommandAction.FINISH_MIGRATION, ReportedStatus.RUNNING, None),
}
# Once the source was told to hand over, a rollback asks it to keep or resume the VM.
_SOURCE_ENGAGED = frozenset({Task.HANDING_OVER, Task.FINISHING})


@dataclass(frozen=True, slots=True)
class Order:
    """A command to put on one host's queue."""

    host: str
    command: AgentCommand


@dataclass(frozen=True, slots=True)
class Step:
    """What one event does to a migration: the VM before and after, the commands that follow (to
    send once the change is committed), and how the migration ended, if it did."""

    change: Change
    orders: tuple[Order, ...] = ()
    migrated: bool = False  # it runs on the target now (vm.migrated)
    failed: tuple[str, str] | None = None  # rolled back: (reason, detail) for vm.migration_failed
    # Written after ``change``, in the same transaction: the VM, rolled back onto its fenced source,
    # failed there (:func:`host_fenced`).
    then: Change | None = None

    @property
    def changes(self) -> tuple[Change, ...]:
        """What to write, in order."""
        return (self.change,) if self.then is None else (self.change, self.then)

    @property
    def source(self) -> str:
        return str(self.change.before.hypervisor_id)

    @property
    def target(self) -> str | None:
        """The target claimed for the migration, if one was."""
        return self.change.before.migration_target


def _at(now: float) -> datetime:
    return datetime.fromtimestamp(now, UTC)


def in_flight(vm: VmRecord, migration: int | None = None) -> bool:
    """The VM migrates (migration ``migration``, when given)."""
    return vm.status is VmStatus.MIGRATING and (migration is None or vm.migrations == migration)


def requested(vm: VmRecord, target_host: str | None, now: float) -> Change | None:
    """``POST /v1/vms/{id}/migrate``: a running VM with nothing else in flight starts its next
    migration; a scheduler chooses the target (``target_host``, when named: only that one)."""
    transition = choose(Event.MIGRATE_REQUESTED, vm.status)
    if transition is None or vm.task is not None or vm.hypervisor_id is None:
        return None
    towards = f"to {target_host}" if target_host else "to a host the scheduler chooses"
    after = replace(
        vm,
        status=transition.target,
        status_reason=f"migrating from {vm.hypervisor_id} {towards}",
        task=Task.CHOOSING_TARGET,
        task_since=_at(now),
        migrations=vm.migrations + 1,
        target_host=target_host,
        migration_target=None,
    )
    return Change(vm, after, transition)


def request_of(vm: VmRecord, now: float) -> VmMigrate:
    """The ``vm.migrate`` of the VM's current migration: the VM as a placement would ask for it (its
    exclusions in force at ``now``; never a gang: a migration moves one VM), its source, the host asked for."""
    if vm.hypervisor_id is None:
        raise ValueError(f"VM {vm.id} is on no host")
    return VmMigrate(
        vm=vm.to_place(now).model_copy(update={"gang": None}),
        migration=vm.migrations,
        source=vm.hypervisor_id,
        target_host=vm.target_host,
    )


def target_claimed(vm: VmRecord, migration: int, host: str) -> Change | None:
    """A scheduler claimed ``host`` for the migration (in Redis, then under PostgreSQL's guard)."""
    transition = choose(Event.TARGET_CLAIMED, vm.status)
    if transition is None or not in_flight(vm, migration) or vm.task is not Task.CHOOSING_TARGET:
        return None
    after = replace(
        vm,
        task=Task.PREPARING,
        migration_target=host,
        status_reason=f"migrating from {vm.hypervisor_id} to {host}: the target prepares",
    )
    return Change(vm, after, transition)


def no_target(vm: VmRecord, migration: int, reason: str, detail: str) -> Change | None:
    """No host passes every rule of the VM (or the one asked for fails one): nothing was claimed."""
    transition = choose(Event.NO_TARGET, vm.status)
    if transition is None or not in_flight(vm, migration) or vm.task is not Task.CHOOSING_TARGET:
        return None
    return Change(vm, _back_on_source(vm, f"migration failed: {reason}: {detail}"), transition)


def _back_on_source(vm: VmRecord, reason: str) -> VmRecord:
    return replace(
        vm,
        status=VmStatus.RUNNING,
        status_reason=reason,
        task=None,
        task_since=None,
        target_host=None,
        migration_target=None,
    )


def on_report(vm: VmRecord, report: VmStatusReport, now: float) -> Step | None:
    """An agent reports on a command of the VM's migration: the step it ends moves the migration on,
    a failure rolls it back; anything else (another migration's, a repeat, the wrong host) is None."""
    if vm.task is Task.ROLLING_BACK:
        return _rolled_back(vm, report, now)
    if not in_flight(vm, report.migration) or vm.task is None or vm.migration_target is None:
        return None
    expected = EXPECTED.get(vm.task)
    if expected is None or report.action is not expected.action:
        return None
    host = vm.migration_target if expected.target else vm.hypervisor_id
    if report.agent_id != host:
        return None
    if report.status is ReportedStatus.FAILED:
        detail = f"{expected.action.value} failed on {host}: {report.message or 'no reason given'}"
        return rollback(vm, Event.MIGRATION_FAILED, (expected.action.value, detail))
    if report.status is not expected.success:
        return None
    if expected.then is None:
        return _finished(vm, now)
    transition = choose(
        Event.AGENT_PREPARED if expected.then is Task.HANDING_OVER else Event.AGENT_HANDED_OVER, vm.status
    )
    if transition is None:
        return None
    after = replace(vm, task=expected.then, status_reason=_progress(vm, expected.then))
    return Step(Change(vm, after, transition), _orders(after, expected.then))


def _progress(vm: VmRecord, task: Task) -> str:
    doing = {
        Task.PREPARING: "the target prepares",
        Task.HANDING_OVER: "the source hands it over",
        Task.FINISHING: "the target takes it",
    }[task]
    return f"migrating from {vm.hypervisor_id} to {vm.migration_target}: {doing}"


def _finished(vm: VmRecord, now: float) -> Step | None:
    transition = choose(Event.TARGET_RUNNING, vm.status)
    if transition is None:
        return None
    after = replace(
        vm,
        status=transition.target,
        status_reason=None,
        hypervisor_id=vm.migration_target,
        # The source stays in its history: its agent's last word of the VM (the copy it cleaned up)
        # comes from a host vmsched placed the VM on.
        attempts=with_history(vm, "migrated", f"live-migrated to {vm.migration_target}", now),
        started_at=_at(now),
        task=None,
        task_since=None,
        target_host=None,
        migration_target=None,
    )
    cleanup = Order(str(vm.hypervisor_id), vm.migration_command(CommandAction.CLEANUP_MIGRATION))
    return Step(Change(vm, after, transition), (cleanup,), migrated=True)


def rollback(vm: VmRecord, event: Event, why: tuple[str, str]) -> Step | None:
    """The migration is called off (``event``: a failed step, or a timeout): the VM runs on its source;
    a claimed target is told to abort and, once the source was told to hand over, the source to roll
    back (task rolling_back: the target stays named, for that command, but holds nothing any more).
    ``why``: (reason, detail) for ``vm.migration_failed``."""
    held = Condition.TARGET_HELD if vm.migration_target is not None else Condition.NO_TARGET_YET
    transition = choose(event, vm.status, [held])
    if transition is None or vm.task is None:
        return None
    reason, detail = why
    orders: list[Order] = []
    target = f" to {vm.migration_target}" if vm.migration_target else ""
    after = _back_on_source(vm, f"migration{target} rolled back: {detail}")
    if vm.migration_target is not None:
        orders.append(Order(vm.migration_target, vm.migration_command(CommandAction.ABORT_MIGRATION)))
        if vm.task in _SOURCE_ENGAGED:
            orders.append(Order(str(vm.hypervisor_id), vm.migration_command(CommandAction.ROLLBACK_MIGRATION)))
            after = replace(after, task=Task.ROLLING_BACK, migration_target=vm.migration_target)
    return Step(Change(vm, after, transition), tuple(orders), failed=(reason, detail))


def _rolled_back(vm: VmRecord, report: VmStatusReport, now: float) -> Step | None:
    """The source answers the rollback: it runs the VM again (the migration is over), or it could not
    keep it (the VM failed; its restart policy applies)."""
    if (
        report.action is not CommandAction.ROLLBACK_MIGRATION
        or report.agent_id != vm.hypervisor_id
        or report.migration != vm.migrations
    ):
        return None
    if report.status is ReportedStatus.RUNNING:
        transition = choose(Event.AGENT_ROLLED_BACK, vm.status)
        if transition is None:
            return None
        after = replace(vm, task=None, task_since=None, migration_target=None)
        return Step(Change(vm, after, transition))
    if report.status is not ReportedStatus.FAILED:
        return None
    transition = choose(Event.AGENT_FAILED, vm.status)
    if transition is None:
        return None
    why = report.message or "no reason given"
    after = replace(
        vm,
        status=transition.target,
        status_reason=f"failed on {vm.hypervisor_id}: it could not keep the VM when its migration rolled back: {why}",
        task=None,
        task_since=None,
        migration_target=None,
        failed_at=_at(now),
    )
    return Step(Change(vm, after, transition))


def timed_out(vm: VmRecord, now: float, timeout: float) -> Step | None:
    """A migration in flight for ``timeout`` seconds or more is rolled back."""
    if not in_flight(vm) or vm.task_since is None or now - vm.task_since.timestamp() < timeout:
        return None
    if vm.migration_target is None:
        detail = f"no target chosen within {timeout:g} s (VMSCHED_MIGRATION_TIMEOUT)"
    else:
        detail = f"still {vm.task.value if vm.task else 'in flight'} after {timeout:g} s (VMSCHED_MIGRATION_TIMEOUT)"
    return rollback(vm, Event.MIGRATION_TIMED_OUT, (TIMEOUT, detail))


def host_fenced(vm: VmRecord, fenced: Collection[str], now: float, *, exclude_for: float) -> Step | None:
    """A host of the VM's migration is among ``fenced`` (declared down: docs/operations.md#fencing): the
    migration is called off now rather than at VMSCHED_MIGRATION_TIMEOUT.

    Its target fenced: rolled back as a failed step (:func:`rollback`: the VM runs on its source, the
    target's share is given back, the target is told to abort and, once the source was told to hand
    over, the source to keep the VM). Its source fenced: rolled back, then failed on the source as
    the host's other VMs are (:func:`vmsched_domain.vm_changes.host_fenced`: the source's share given
    back too, its restart policy applies); the target is told to abort, the source (down) nothing."""
    if not in_flight(vm) or vm.task is None or vm.hypervisor_id is None:
        return None
    source = vm.hypervisor_id
    if source not in fenced:
        if vm.migration_target is None or vm.migration_target not in fenced:
            return None
        return rollback(vm, Event.MIGRATION_FAILED, (TARGET_FENCED, f"its target {vm.migration_target} was fenced"))
    why = (SOURCE_FENCED, f"its source {source} was fenced")
    if vm.migration_target is None:  # no target claimed yet: nothing moved, nothing to give back there
        called_off = no_target(vm, vm.migrations, *why)
        back = None if called_off is None else Step(called_off, failed=why)
    else:
        back = rollback(vm, Event.MIGRATION_FAILED, why)
    if back is None:
        return None
    failed = vm_changes.host_fenced(back.change.after, now, exclude_for=exclude_for)
    if failed is None:
        return None
    # A rollback in progress names its target; over now: nothing of the migration is left.
    reason = f"{failed.after.status_reason} in the middle of migration {vm.migrations}"
    after = replace(failed.after, status_reason=reason, task_since=None, migration_target=None)
    ended = Change(failed.before, after, failed.transition)
    orders = tuple(order for order in back.orders if order.host != source)
    return replace(back, orders=orders, then=ended)


def prepare_command(vm_id: UUID, name: str, resources: Resources, order: MigrationOrder) -> AgentCommand:
    """The first command of a migration whose target was claimed (``vm.migrating``): to the target."""
    return agent_command(CommandAction.PREPARE_MIGRATION, vm_id, name, resources, migration=order)


def awaited(vm: VmRecord) -> Order | None:
    """The command the migration's current step waits on, to send again when it went unanswered (a
    broker restart loses commands in flight; agents carry out a repeat once). None while no target is
    claimed (the scheduler's ``vm.migrate`` is what is awaited then) or when nothing is in flight."""
    if vm.task is Task.ROLLING_BACK and vm.status is VmStatus.RUNNING and vm.migration_target is not None:
        return Order(str(vm.hypervisor_id), vm.migration_command(CommandAction.ROLLBACK_MIGRATION))
    if not in_flight(vm) or vm.task is None or vm.migration_target is None:
        return None
    expected = EXPECTED.get(vm.task)
    if expected is None:
        return None
    return _order(vm, expected)


def _order(vm: VmRecord, expected: Expected) -> Order:
    host = vm.migration_target if expected.target else vm.hypervisor_id
    return Order(str(host), vm.migration_command(expected.action))


def _orders(vm: VmRecord, task: Task) -> tuple[Order, ...]:
    return (_order(vm, EXPECTED[task]),)


class Outcome(StrEnum):
    """How one migration stands (what a drain or a rebalance waits on)."""

    IN_FLIGHT = "in_flight"
    MOVED = "moved"  # the VM runs on another host than it left
    ROLLED_BACK = "rolled_back"  # the VM runs on the host it left; its status_reason says why


def outcome(vm: VmRecord, migration: int, source: str) -> Outcome:
    """How migration number ``migration`` of the VM, which left ``source``, stands by its row now."""
    if in_flight(vm, migration):
        return Outcome.IN_FLIGHT
    return Outcome.MOVED if vm.hypervisor_id != source else Outcome.ROLLED_BACK
