"""What each lifecycle event does to a VM's record, as pure functions: the lifecycle
(:mod:`vmsched_domain.lifecycle`) says which status follows; these say what else changes with it
(attempts, exclusions, timestamps, the reason a person reads). A store locks the row, calls one of
these, and writes the record it returns with :func:`vmsched_pg.vm_writes.apply`.

Each returns ``None`` when the event does not apply to the VM as it is (a late or repeated report):
the caller then changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from vmsched_contract.messages import CommandAction, ReportedStatus
from vmsched_contract.status import Task, VmStatus
from vmsched_domain.lifecycle import Capacity, Condition, Event, Transition, choose
from vmsched_domain.records import VmRecord


@dataclass(frozen=True, slots=True)
class Change:
    """A VM before and after one transition."""

    before: VmRecord
    after: VmRecord
    transition: Transition

    @property
    def released_from(self) -> str | None:
        """The host whose capacity this change gives back, if it does: the VM's host, or the target
        of its migration when the migration is rolled back."""
        if self.transition.capacity is Capacity.RELEASE:
            return self.before.hypervisor_id
        if self.transition.capacity is Capacity.RELEASE_TARGET:
            return self.before.migration_target
        return None


def _iso(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).isoformat()


def with_history(vm: VmRecord, outcome: str, message: str, now: float) -> list[dict[str, Any]]:
    """The VM's ``attempts`` with one more entry: what became of its attempt on its host."""
    entry = {"attempt": vm.attempt, "host": vm.hypervisor_id, "outcome": outcome, "message": message, "at": _iso(now)}
    return [*vm.attempts, entry]


def _excluding(vm: VmRecord, host: str | None, now: float, exclude_for: float) -> dict[str, float]:
    """The VM's exclusions, expired ones dropped, ``host`` added until ``now + exclude_for``."""
    kept = {h: until for h, until in vm.exclusions.items() if until > now}
    if host is not None:
        kept[host] = now + exclude_for
    return kept


def agent_failed(
    vm: VmRecord, agent_id: str, message: str, now: float, *, max_attempts: int, exclude_for: float
) -> Change | None:
    """The agent could not create the VM, or reports a VM of its own failed.

    A create it never ran is retried on another host (this one excluded for ``exclude_for``) while
    fewer than ``max_attempts`` creates failed since the VM last ran; restarts do not count."""
    if vm.hypervisor_id != agent_id:
        return None
    failures = vm.failures + 1
    retries = Condition.RETRIES_LEFT if failures < max_attempts else Condition.NO_RETRIES_LEFT
    transition = choose(Event.AGENT_FAILED, vm.status, [retries])
    if transition is None:
        return None
    history = with_history(vm, "failed", message, now)
    if transition.target is VmStatus.PENDING:
        after = replace(
            vm,
            status=VmStatus.PENDING,
            status_reason=f"attempt {vm.attempt} on {agent_id} failed: {message}; retrying on another host",
            hypervisor_id=None,
            attempt=vm.attempt + 1,
            failures=failures,
            exclusions=_excluding(vm, agent_id, now, exclude_for),
            attempts=history,
            scheduled_at=None,
            started_at=None,
        )
    elif vm.started_at is not None:
        after = replace(
            vm,
            status=VmStatus.FAILED,
            status_reason=f"failed on {agent_id}: {message}",
            failures=failures,
            exclusions=_excluding(vm, agent_id, now, exclude_for),
            attempts=history,
            failed_at=datetime.fromtimestamp(now, UTC),
        )
    else:
        tried = "; ".join(
            f"#{a['attempt']} {a['host']}: {a.get('message') or a.get('outcome')}"
            for a in history
            if a.get("outcome") == "failed"
        )
        after = replace(
            vm,
            status=VmStatus.FAILED,
            status_reason=f"failed on every attempt ({failures}): {tried}",
            failures=failures,
            attempts=history,
            failed_at=datetime.fromtimestamp(now, UTC),
        )
    return Change(vm, after, transition)


def agent_deleted(vm: VmRecord, agent_id: str, now: float) -> Change | None:
    if vm.hypervisor_id != agent_id:
        return None
    transition = choose(Event.AGENT_DELETED, vm.status)
    if transition is None:
        return None
    if transition.target is VmStatus.FAILED:  # preempted: gone now; its restart policy applies
        after = replace(
            vm,
            status=VmStatus.FAILED,
            status_reason=vm.status_reason,
            attempts=with_history(vm, "preempted", vm.status_reason or "", now),
            failed_at=datetime.fromtimestamp(now, UTC),
        )
        return Change(vm, after, transition)
    after = replace(vm, status=VmStatus.DELETED, status_reason=None, attempts=with_history(vm, "deleted", "", now))
    return Change(vm, after, transition)


def agent_delete_failed(vm: VmRecord, agent_id: str, message: str) -> Change | None:
    if vm.hypervisor_id != agent_id:
        return None
    transition = choose(Event.AGENT_DELETE_FAILED, vm.status)
    if transition is None:
        return None
    reason = f"delete failed on {agent_id}: {message}; it will be sent again"
    return Change(vm, replace(vm, status_reason=reason), transition)


def delete_requested(vm: VmRecord) -> Change | None:
    transition = choose(Event.DELETE_REQUESTED, vm.status)
    if transition is None:
        return None
    reason = None if transition.target is VmStatus.DELETED else "deleting: its agent was told"
    return Change(vm, replace(vm, status=transition.target, status_reason=reason), transition)


# How far an agent's clock and the services' may differ (NTP keeps hosts well within this): a heartbeat
# is taken for one taken after a VM started, or changed, only when its time is this much later.
CLOCK_SKEW = 2.0


def host_returned(vm: VmRecord, listed: bool, now: float, heard_at: float | None = None) -> Change | None:
    """A silent host heartbeats again; ``listed``: its heartbeat lists this VM; ``heard_at``: when
    the agent took that heartbeat. A heartbeat taken before the VM started running (one that waited
    in a backlog while the host was marked offline) says nothing of it: the VM stays ``unknown`` for
    the host's next heartbeat to settle, rather than failing a VM that may be running well."""
    if (
        not listed
        and heard_at is not None
        and vm.started_at is not None
        and heard_at < vm.started_at.timestamp() + CLOCK_SKEW
    ):
        return None
    if listed:
        fact = Condition.LISTED
    elif vm.started_at is None:
        fact = Condition.NOT_LISTED_NEVER_RAN
    else:
        fact = Condition.NOT_LISTED_HAD_RUN
    transition = choose(Event.HOST_RETURNED, vm.status, [fact])
    if transition is None:
        return None
    host = vm.hypervisor_id
    if transition.target is VmStatus.RUNNING:
        after = replace(vm, status=VmStatus.RUNNING, status_reason=None)
    elif transition.target is VmStatus.SCHEDULED:
        after = replace(vm, status=VmStatus.SCHEDULED, status_reason=f"host {host} is back; its create is still due")
    else:
        after = replace(
            vm,
            status=VmStatus.FAILED,
            status_reason=f"host {host} came back without it",
            attempts=with_history(vm, "lost by its host", f"host {host} came back without it", now),
            failed_at=datetime.fromtimestamp(now, UTC),
        )
    return Change(vm, after, transition)


def host_lost(vm: VmRecord, now: float, *, exclude_for: float) -> Change | None:
    """The VM's host was silent for AGENT_LOST_TIMEOUT."""
    transition = choose(Event.HOST_LOST, vm.status)
    if transition is None:
        return None
    host = vm.hypervisor_id
    if transition.target is VmStatus.DELETED:
        after = replace(
            vm,
            status=VmStatus.DELETED,
            status_reason=f"deleted: host {host} was lost",
            attempts=with_history(vm, "deleted", f"host {host} was lost", now),
        )
    elif vm.status is VmStatus.PREEMPTED:
        after = replace(
            vm,
            status=VmStatus.FAILED,
            attempts=with_history(vm, "preempted", f"host {host} was lost before it deleted the VM", now),
            failed_at=datetime.fromtimestamp(now, UTC),
        )
    else:
        after = replace(
            vm,
            status=VmStatus.FAILED,
            status_reason=f"agent lost connection: host {host} silent past AGENT_LOST_TIMEOUT",
            exclusions=_excluding(vm, host, now, exclude_for),
            attempts=with_history(vm, "agent lost connection", f"host {host} silent", now),
            failed_at=datetime.fromtimestamp(now, UTC),
        )
    return Change(vm, after, transition)


def host_fenced(vm: VmRecord, now: float, *, exclude_for: float) -> Change | None:
    """The VM's host was fenced (declared down by an operator, or by the fence command): it runs
    nowhere now, whatever it last said."""
    transition = choose(Event.HOST_FENCED, vm.status)
    if transition is None:
        return None
    host = vm.hypervisor_id
    if transition.target is VmStatus.DELETED:
        after = replace(
            vm,
            status=VmStatus.DELETED,
            status_reason=f"deleted: host {host} was fenced",
            task=None,
            attempts=with_history(vm, "deleted", f"host {host} was fenced", now),
        )
    elif vm.status is VmStatus.PREEMPTED:
        after = replace(
            vm,
            status=VmStatus.FAILED,
            task=None,
            attempts=with_history(vm, "preempted", f"host {host} was fenced before it deleted the VM", now),
            failed_at=datetime.fromtimestamp(now, UTC),
        )
    else:
        after = replace(
            vm,
            status=VmStatus.FAILED,
            status_reason=f"host fenced: {host} was declared down",
            task=None,
            exclusions=_excluding(vm, host, now, exclude_for),
            attempts=with_history(vm, "host fenced", f"host {host} fenced", now),
            failed_at=datetime.fromtimestamp(now, UTC),
        )
    return Change(vm, after, transition)


def preempted(vm: VmRecord, by: VmRecord | UUID, by_priority: int) -> Change | None:
    """A VM of priority ``by_priority`` took this VM's room on its host (the caller holds both rows
    and moves the capacity in the same transaction)."""
    transition = choose(Event.PREEMPTED, vm.status)
    if transition is None:
        return None
    preemptor = by.id if isinstance(by, VmRecord) else by
    reason = f"preempted by VM {preemptor} (priority {by_priority} > {vm.priority}) on {vm.hypervisor_id}"
    return Change(vm, replace(vm, status=VmStatus.PREEMPTED, status_reason=reason, preempted_by=preemptor), transition)


def restart(vm: VmRecord) -> Change | None:
    """The restart policy brings back a failed VM that had run."""
    transition = choose(Event.RESTART, vm.status)
    if transition is None or vm.started_at is None:
        return None
    after = replace(
        vm,
        status=VmStatus.PENDING,
        status_reason="restarting after failure (restart_policy on_failure)",
        hypervisor_id=None,
        attempt=vm.attempt + 1,
        restart_count=vm.restart_count + 1,
        failures=0,
        scheduled_at=None,
        started_at=None,
        failed_at=None,
    )
    return Change(vm, after, transition)


# -- power ----------------------------------------------------------------------------------------


def stop_requested(vm: VmRecord, now: float) -> Change | None:
    """``POST /v1/vms/{id}/stop``: a running VM is stopped; its host keeps its room."""
    transition = choose(Event.STOP_REQUESTED, vm.status)
    if transition is None or vm.task not in (None, Task.STARTING):
        return None
    after = replace(
        vm,
        status=transition.target,
        status_reason=f"stopping: its agent ({vm.hypervisor_id}) was told",
        task=Task.STOPPING,
        task_since=datetime.fromtimestamp(now, UTC),
    )
    return Change(vm, after, transition)


def start_requested(vm: VmRecord, now: float) -> Change | None:
    """``POST /v1/vms/{id}/start``: a stopped VM is started on its host."""
    transition = choose(Event.START_REQUESTED, vm.status)
    if transition is None or vm.task not in (None, Task.STOPPING):
        return None
    after = replace(
        vm,
        status=transition.target,
        status_reason=f"starting: its agent ({vm.hypervisor_id}) was told",
        task=Task.STARTING,
        task_since=datetime.fromtimestamp(now, UTC),
    )
    return Change(vm, after, transition)


# The power command each power task waits on, and what its agent reports when it is done.
POWER_TASKS: dict[Task, tuple[CommandAction, ReportedStatus, Event, Event]] = {
    Task.STOPPING: (CommandAction.STOP, ReportedStatus.STOPPED, Event.AGENT_STOPPED, Event.AGENT_STOP_FAILED),
    Task.STARTING: (CommandAction.START, ReportedStatus.RUNNING, Event.AGENT_STARTED, Event.AGENT_START_FAILED),
}


def power_reported(
    vm: VmRecord, agent_id: str, action: CommandAction, status: ReportedStatus, message: str
) -> Change | None:
    """The agent answers the stop or start the VM's task waits on: done, or failed (the VM stays as
    it was, with the reason). A report of another command, a late one or a repeat is None."""
    if vm.hypervisor_id != agent_id or vm.task not in POWER_TASKS:
        return None
    awaited, success, done, failed = POWER_TASKS[vm.task]
    if action is not awaited or status not in (success, ReportedStatus.FAILED):
        return None
    event = done if status is success else failed
    transition = choose(event, vm.status)
    if transition is None:
        return None
    reason = None if status is success else f"{action.value} failed on {agent_id}: {message or 'no reason given'}"
    after = replace(vm, status=transition.target, status_reason=reason, task=None, task_since=None)
    return Change(vm, after, transition)


def power_command(vm: VmRecord) -> CommandAction | None:
    """The power command the VM's task waits on (to send, or send again), if any."""
    return POWER_TASKS[vm.task][0] if vm.task in POWER_TASKS else None
