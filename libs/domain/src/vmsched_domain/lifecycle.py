"""The VM lifecycle: every status a VM can have and every change between them, stated once.

Pure: no I/O. The services' stores change a VM's status only as :data:`TRANSITIONS` allows: they
ask :func:`choose` (one VM at a time) or build a batched statement from :func:`sources` and
:func:`transition` (many at once). docs/lifecycle.md shows the same table (``make docs`` writes it;
a test fails when the two differ).

What holds capacity on a host: ``scheduled``, ``running``, ``unknown``, ``deleting``, ``stopped`` and
``migrating`` (on its source, ``hypervisor_id``, and once a scheduler claimed one, on its migration
target as well). A VM takes a host's share only by ``placed`` or ``target_claimed`` (a claim and a
guarded commit) and gives one back only by a transition marked ``release`` or ``release target``, in
the same transaction that lowers the host's allocations.

Besides its status a VM may have a :class:`Task`: what vmsched has asked of an agent for it and awaits
(Nova's task_state). A migration's steps are tasks of a ``migrating`` VM (:mod:`vmsched_domain.live_migration`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from vmsched_contract.status import Task, VmStatus


class Event(StrEnum):
    """What happened to a VM, and who says so."""

    PLACED = "placed"  # a scheduler claimed a host and committed it
    NO_HOST = "no_host"  # a scheduler found no host that passes every rule
    AGENT_RUNNING = "agent_running"  # the agent reports it running
    AGENT_FAILED = "agent_failed"  # the agent reports a create it could not carry out, or a VM that died
    AGENT_DELETED = "agent_deleted"  # the agent reports it deleted
    AGENT_DELETE_FAILED = "agent_delete_failed"  # the agent could not delete it
    DELETE_REQUESTED = "delete_requested"  # DELETE /v1/vms/{id}
    HOST_SILENT = "host_silent"  # no heartbeat for AGENT_OFFLINE_TIMEOUT
    HOST_RETURNED = "host_returned"  # a silent host heartbeats again
    HOST_LOST = "host_lost"  # no heartbeat for AGENT_LOST_TIMEOUT
    HOST_FENCED = "host_fenced"  # its host was declared down: by an operator, or the fence command
    RESTART = "restart"  # the restart policy brings a failed VM back after RESTART_DELAY
    ROOM_APPEARED = "room_appeared"  # the waker saw capacity appear that a waiting VM fits
    WAIT_EXPIRED = "wait_expired"  # a waiting VM's wait_s passed
    PREEMPTED = "preempted"  # a VM of higher priority that fit nowhere took its room
    MIGRATE_REQUESTED = "migrate_requested"  # POST /v1/vms/{id}/migrate
    TARGET_CLAIMED = "target_claimed"  # a scheduler claimed a migration target and committed it
    NO_TARGET = "no_target"  # a scheduler found no target that passes every rule
    AGENT_PREPARED = "agent_prepared"  # the migration target is ready to receive the VM
    AGENT_HANDED_OVER = "agent_handed_over"  # the source handed the VM over to the target
    TARGET_RUNNING = "target_running"  # the migration target runs the VM
    MIGRATION_FAILED = "migration_failed"  # an agent could not carry out its step of a migration
    MIGRATION_TIMED_OUT = "migration_timed_out"  # a migration in flight longer than MIGRATION_TIMEOUT
    STOP_REQUESTED = "stop_requested"  # POST /v1/vms/{id}/stop
    AGENT_STOPPED = "agent_stopped"  # the agent reports it stopped
    AGENT_STOP_FAILED = "agent_stop_failed"  # the agent could not stop it
    START_REQUESTED = "start_requested"  # POST /v1/vms/{id}/start
    AGENT_STARTED = "agent_started"  # the agent reports it started
    AGENT_START_FAILED = "agent_start_failed"  # the agent could not start it
    AGENT_ROLLED_BACK = "agent_rolled_back"  # the source runs the VM again after a migration rolled back


class Capacity(StrEnum):
    """What the transition does to the VM's share of its host."""

    # Takes a share of a host, its own or a migration target (claimed in Redis, added under
    # PostgreSQL's guard).
    CLAIM = "claim"
    KEEP = "keep"  # keeps what it holds, or holds none before and after
    RELEASE = "release"  # gives back its host's share (hypervisor_id: after a migration, the source)
    RELEASE_TARGET = "release target"  # gives back its migration target's share (a migration rolled back)


class Condition(StrEnum):
    """The facts that choose between two transitions of one event from one status."""

    ALWAYS = ""
    RETRIES_LEFT = "attempts left (fewer than MAX_ATTEMPTS failed)"
    NO_RETRIES_LEFT = "no attempts left"
    LISTED = "its heartbeat lists the VM"
    NOT_LISTED_NEVER_RAN = "not listed, and it never ran (its create command is still to come)"
    NOT_LISTED_HAD_RUN = "not listed, and it had run (the host lost it)"
    MAY_WAIT = "its wait_s has not passed"
    MAY_NOT_WAIT = "wait_s is 0 or has passed"
    TARGET_HELD = "a target is claimed"
    NO_TARGET_YET = "no target claimed yet"


@dataclass(frozen=True, slots=True)
class Transition:
    event: Event
    source: VmStatus
    target: VmStatus
    capacity: Capacity = Capacity.KEEP
    when: Condition = Condition.ALWAYS
    emits: str = ""  # the message published once the change is committed
    note: str = ""


S = VmStatus
E = Event
TRANSITIONS: tuple[Transition, ...] = (
    Transition(E.PLACED, S.PENDING, S.SCHEDULED, Capacity.CLAIM, emits="vm.assigned"),
    Transition(E.NO_HOST, S.PENDING, S.UNSCHEDULABLE, when=Condition.MAY_NOT_WAIT, emits="vm.unschedulable"),
    Transition(
        E.NO_HOST,
        S.PENDING,
        S.WAITING,
        when=Condition.MAY_WAIT,
        emits="vm.waiting",
        note="placed, oldest first, when capacity it fits appears (docs/placement.md)",
    ),
    Transition(
        E.ROOM_APPEARED,
        S.WAITING,
        S.PENDING,
        emits="vm.create",
        note="decided again by the one pipeline; attempt + 1",
    ),
    Transition(E.WAIT_EXPIRED, S.WAITING, S.UNSCHEDULABLE, emits="vm.unschedulable", note="with the last reason"),
    Transition(
        E.PREEMPTED,
        S.SCHEDULED,
        S.PREEMPTED,
        Capacity.RELEASE,
        emits="vm.preempted",
        note="its room goes to the preemptor in the same transaction; its agent is told to delete it",
    ),
    Transition(
        E.PREEMPTED,
        S.RUNNING,
        S.PREEMPTED,
        Capacity.RELEASE,
        emits="vm.preempted",
        note="its room goes to the preemptor in the same transaction; its agent is told to delete it",
    ),
    Transition(E.AGENT_DELETED, S.PREEMPTED, S.FAILED, note="the restart policy applies"),
    Transition(E.HOST_LOST, S.PREEMPTED, S.FAILED, note="nothing left to delete; the restart policy applies"),
    Transition(E.DELETE_REQUESTED, S.PREEMPTED, S.DELETED, emits="vm.deleted", note="its delete is already sent"),
    Transition(E.AGENT_RUNNING, S.SCHEDULED, S.RUNNING),
    Transition(E.AGENT_RUNNING, S.UNKNOWN, S.RUNNING, note="its host is back"),
    Transition(
        E.AGENT_FAILED,
        S.SCHEDULED,
        S.PENDING,
        Capacity.RELEASE,
        Condition.RETRIES_LEFT,
        emits="vm.create",
        note="retried on another host; this one excluded for EXCLUDE_FOR",
    ),
    Transition(E.AGENT_FAILED, S.SCHEDULED, S.FAILED, Capacity.RELEASE, Condition.NO_RETRIES_LEFT),
    Transition(E.AGENT_FAILED, S.RUNNING, S.FAILED, Capacity.RELEASE, note="the restart policy applies"),
    Transition(E.AGENT_FAILED, S.UNKNOWN, S.FAILED, Capacity.RELEASE, note="the restart policy applies"),
    Transition(E.AGENT_DELETED, S.DELETING, S.DELETED, Capacity.RELEASE, emits="vm.deleted"),
    Transition(E.AGENT_DELETE_FAILED, S.DELETING, S.DELETING, note="the delete is sent again"),
    Transition(E.DELETE_REQUESTED, S.PENDING, S.DELETED, emits="vm.deleted"),
    Transition(E.DELETE_REQUESTED, S.UNSCHEDULABLE, S.DELETED, emits="vm.deleted"),
    Transition(E.DELETE_REQUESTED, S.WAITING, S.DELETED, emits="vm.deleted", note="never placed"),
    Transition(E.DELETE_REQUESTED, S.FAILED, S.DELETED, emits="vm.deleted"),
    Transition(E.DELETE_REQUESTED, S.SCHEDULED, S.DELETING, note="its agent is told to delete it"),
    Transition(E.DELETE_REQUESTED, S.RUNNING, S.DELETING, note="its agent is told to delete it"),
    Transition(E.DELETE_REQUESTED, S.UNKNOWN, S.DELETING, note="sent when the host is back; deleted if it is lost"),
    Transition(E.HOST_SILENT, S.SCHEDULED, S.UNKNOWN, note="presumed running: nothing is failed or deleted"),
    Transition(E.HOST_SILENT, S.RUNNING, S.UNKNOWN, note="presumed running: nothing is failed or deleted"),
    Transition(E.HOST_RETURNED, S.UNKNOWN, S.RUNNING, when=Condition.LISTED),
    Transition(
        E.HOST_RETURNED,
        S.UNKNOWN,
        S.SCHEDULED,
        when=Condition.NOT_LISTED_NEVER_RAN,
        note="the create command waits in the host's queue, or is sent again",
    ),
    Transition(
        E.HOST_RETURNED,
        S.UNKNOWN,
        S.FAILED,
        Capacity.RELEASE,
        Condition.NOT_LISTED_HAD_RUN,
        note="the restart policy applies",
    ),
    Transition(E.HOST_LOST, S.UNKNOWN, S.FAILED, Capacity.RELEASE, note="the restart policy applies"),
    Transition(E.HOST_LOST, S.DELETING, S.DELETED, Capacity.RELEASE, emits="vm.deleted", note="nothing left to delete"),
    *(
        Transition(
            E.HOST_FENCED,
            source,
            S.FAILED,
            Capacity.RELEASE,
            note="its host is down for sure: the restart policy applies",
        )
        for source in (S.SCHEDULED, S.RUNNING, S.UNKNOWN, S.STOPPED)
    ),
    Transition(
        E.HOST_FENCED, S.DELETING, S.DELETED, Capacity.RELEASE, emits="vm.deleted", note="nothing left to delete"
    ),
    Transition(E.HOST_FENCED, S.PREEMPTED, S.FAILED, note="nothing left to delete; the restart policy applies"),
    Transition(
        E.RESTART,
        S.FAILED,
        S.PENDING,
        emits="vm.create",
        note="restart_policy on_failure, a VM that ran, after RESTART_DELAY; restart_count + 1",
    ),
    Transition(
        E.MIGRATE_REQUESTED,
        S.RUNNING,
        S.MIGRATING,
        emits="vm.migrate",
        note="task choosing_target: a scheduler chooses a target by every rule of the VM, the source excluded",
    ),
    Transition(
        E.TARGET_CLAIMED,
        S.MIGRATING,
        S.MIGRATING,
        Capacity.CLAIM,
        emits="vm.migrating",
        note="on the target, as a placement claims: the VM holds both hosts now; task preparing",
    ),
    Transition(
        E.NO_TARGET, S.MIGRATING, S.RUNNING, emits="vm.migration_failed", note="nothing was claimed; nothing moved"
    ),
    Transition(E.AGENT_PREPARED, S.MIGRATING, S.MIGRATING, note="task handing_over: the source is told to hand over"),
    Transition(E.AGENT_HANDED_OVER, S.MIGRATING, S.MIGRATING, note="task finishing: the target is told to take it"),
    Transition(
        E.TARGET_RUNNING,
        S.MIGRATING,
        S.RUNNING,
        Capacity.RELEASE,
        emits="vm.migrated",
        note="on the target now: the source's share given back, the source told to clean up",
    ),
    Transition(
        E.MIGRATION_FAILED,
        S.MIGRATING,
        S.RUNNING,
        Capacity.RELEASE_TARGET,
        emits="vm.migration_failed",
        note="rolled back: on its source; the target told to abort and, once it was told to hand over, the "
        "source to keep (or resume) it (task rolling_back)",
    ),
    Transition(
        E.MIGRATION_TIMED_OUT,
        S.MIGRATING,
        S.RUNNING,
        Capacity.RELEASE_TARGET,
        Condition.TARGET_HELD,
        emits="vm.migration_failed",
        note="rolled back as a failure after VMSCHED_MIGRATION_TIMEOUT",
    ),
    Transition(
        E.MIGRATION_TIMED_OUT,
        S.MIGRATING,
        S.RUNNING,
        when=Condition.NO_TARGET_YET,
        emits="vm.migration_failed",
        note="no scheduler answered within VMSCHED_MIGRATION_TIMEOUT",
    ),
    Transition(
        E.STOP_REQUESTED, S.RUNNING, S.STOPPED, note="task stopping: its agent is told; its host keeps the room"
    ),
    Transition(E.AGENT_STOPPED, S.STOPPED, S.STOPPED, note="the stop is done"),
    Transition(E.AGENT_STOP_FAILED, S.STOPPED, S.RUNNING, note="it still runs; status_reason says why"),
    Transition(E.START_REQUESTED, S.STOPPED, S.RUNNING, note="task starting: its agent is told"),
    Transition(E.AGENT_STARTED, S.RUNNING, S.RUNNING, note="the start is done"),
    Transition(E.AGENT_START_FAILED, S.RUNNING, S.STOPPED, note="still stopped; status_reason says why"),
    Transition(E.DELETE_REQUESTED, S.STOPPED, S.DELETING, note="its agent is told to delete it"),
    Transition(E.AGENT_ROLLED_BACK, S.RUNNING, S.RUNNING, note="the source runs it again: the migration is over"),
)
del S, E

# The status a VM has while each task is in flight: a task found with another status is over (the VM
# failed, was deleted, ...), and nothing is sent again for it.
TASK_STATUS: dict[Task, VmStatus] = {
    Task.STOPPING: VmStatus.STOPPED,
    Task.STARTING: VmStatus.RUNNING,
    Task.CHOOSING_TARGET: VmStatus.MIGRATING,
    Task.PREPARING: VmStatus.MIGRATING,
    Task.HANDING_OVER: VmStatus.MIGRATING,
    Task.FINISHING: VmStatus.MIGRATING,
    Task.ROLLING_BACK: VmStatus.RUNNING,
}

# The statuses whose VM holds a share of its host (hypervisor_id).
HOLDS_CAPACITY: frozenset[VmStatus] = frozenset(
    {VmStatus.SCHEDULED, VmStatus.RUNNING, VmStatus.UNKNOWN, VmStatus.DELETING, VmStatus.STOPPED, VmStatus.MIGRATING}
)
# The statuses that imply a message until the broker confirms it (vmsched_pg.outbox): vm.create
# for pending; the delete command for deleting and for preempted.
IMPLIES_MESSAGE: frozenset[VmStatus] = frozenset({VmStatus.PENDING, VmStatus.DELETING, VmStatus.PREEMPTED})
IMPLIES_DELETE: frozenset[VmStatus] = frozenset({VmStatus.DELETING, VmStatus.PREEMPTED})
# What counts against its project's quota: every VM but those that ended deleted, unschedulable or
# failed (a failed VM that restarts counts again from its restart on).
USES_QUOTA: frozenset[VmStatus] = frozenset(set(VmStatus) - {VmStatus.DELETED, VmStatus.UNSCHEDULABLE, VmStatus.FAILED})
# The statuses whose VM also holds a share of its migration target, once one is claimed
# (migration_target is set then).
HOLDS_TARGET: frozenset[VmStatus] = frozenset({VmStatus.MIGRATING})
# Where a VM rests until something happens to it: nothing of vmsched's own is in flight for it.
SETTLED: frozenset[VmStatus] = frozenset(
    {VmStatus.RUNNING, VmStatus.UNSCHEDULABLE, VmStatus.FAILED, VmStatus.DELETED, VmStatus.STOPPED}
)
# No transition leaves these.
TERMINAL: frozenset[VmStatus] = frozenset(
    status for status in VmStatus if not any(t.source is status for t in TRANSITIONS)
)


class IllegalTransition(ValueError):
    """A store was asked for a change the lifecycle does not allow."""


def transitions(event: Event) -> tuple[Transition, ...]:
    return tuple(t for t in TRANSITIONS if t.event is event)


def sources(event: Event, *, when: Condition | None = None) -> tuple[str, ...]:
    """The statuses ``event`` moves a VM out of (those with condition ``when``, if given), as the
    strings a SQL ``status IN (...)`` compares with; in the order of :class:`VmStatus`."""
    found = {t.source for t in transitions(event) if when is None or t.when is when}
    return tuple(status.value for status in VmStatus if status in found)


def transition(event: Event, source: VmStatus | str, when: Condition = Condition.ALWAYS) -> Transition:
    """The one transition of ``event`` from ``source`` under ``when``; raises :class:`IllegalTransition`."""
    for t in TRANSITIONS:
        if t.event is event and t.source == source and t.when is when:
            return t
    raise IllegalTransition(f"{event.value} from {source}" + (f" when {when.value}" if when.value else ""))


def choose(event: Event, source: VmStatus | str, facts: Iterable[Condition] = ()) -> Transition | None:
    """The transition ``event`` makes from ``source`` given the conditions that hold, or None when
    the event does not apply to a VM in that status (a late or repeated report: ignored)."""
    holding = {Condition.ALWAYS, *facts}
    for t in TRANSITIONS:
        if t.event is event and t.source == source and t.when in holding:
            return t
    return None


def sql_in(statuses: Iterable[VmStatus | str]) -> str:
    """``('a', 'b')``: statuses as a SQL list for ``status IN ...`` (this module's constants, never
    input: they are written into statements, not bound)."""
    wanted = {VmStatus(status) for status in statuses}
    values = [status.value for status in VmStatus if status in wanted]  # a stable text, for statement caches
    if not values:
        raise ValueError("an empty status list matches nothing; check the transition table")
    return "(" + ", ".join(f"'{value}'" for value in values) + ")"


def markdown_table() -> str:
    """The table of docs/lifecycle.md."""
    lines = [
        "| event | from | to | when | capacity | publishes | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in TRANSITIONS:
        lines.append(
            f"| `{t.event.value}` | `{t.source.value}` | `{t.target.value}` | {t.when.value} | {t.capacity.value} "
            f"| {f'`{t.emits}`' if t.emits else ''} | {t.note} |"
        )
    return "\n".join(lines)
