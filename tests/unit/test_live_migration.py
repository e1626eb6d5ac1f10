"""A migration's state machine and the power changes (pure: no servers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.unit.test_vm_changes import NOW, vm
from vmsched_contract.messages import CommandAction, MigrationOrder, ReportedStatus, VmStatusReport
from vmsched_contract.status import Task, VmStatus
from vmsched_domain import live_migration
from vmsched_domain.lifecycle import Capacity, Event
from vmsched_domain.live_migration import Order, Step
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import power_command, power_reported, start_requested, stop_requested
from vmsched_gateway.identity import placed_on

SOURCE, TARGET = "hv-src", "hv-dst"


def running() -> VmRecord:
    return vm(VmStatus.RUNNING, SOURCE)


def claimed(task: Task = Task.PREPARING) -> VmRecord:
    """A VM whose migration (number 1) has its target claimed, at ``task``."""
    asked = live_migration.requested(running(), None, NOW)
    assert asked is not None
    change = live_migration.target_claimed(asked.after, 1, TARGET)
    assert change is not None
    return replace(change.after, task=task)


def report(
    action: CommandAction, status: ReportedStatus, host: str, *, number: int = 1, message: str = ""
) -> VmStatusReport:
    return VmStatusReport(
        vm_id=claimed().id, agent_id=host, status=status, action=action, migration=number, message=message
    )


def on(vm_record: VmRecord, sent: VmStatusReport) -> Step | None:
    return live_migration.on_report(vm_record, sent.model_copy(update={"vm_id": vm_record.id}), NOW)


def orders(step: Step) -> Sequence[tuple[str, CommandAction]]:
    return [(order.host, order.command.action) for order in step.orders]


def test_a_request_starts_the_next_migration_with_nothing_claimed_yet() -> None:
    change = live_migration.requested(running(), None, NOW)
    assert change is not None
    after = change.after
    assert (after.status, after.task, after.migrations, after.migration_target) == (
        VmStatus.MIGRATING,
        Task.CHOOSING_TARGET,
        1,
        None,
    )
    assert change.transition.capacity is Capacity.KEEP
    request = live_migration.request_of(after, NOW)
    assert (request.source, request.target_host, request.migration, request.vm.gang) == (SOURCE, None, 1, None)


@pytest.mark.parametrize(
    "status", [VmStatus.SCHEDULED, VmStatus.UNKNOWN, VmStatus.STOPPED, VmStatus.DELETING, VmStatus.MIGRATING]
)
def test_only_a_running_vm_with_nothing_in_flight_may_migrate(status: VmStatus) -> None:
    assert live_migration.requested(vm(status, SOURCE), None, NOW) is None
    assert live_migration.requested(replace(running(), task=Task.STARTING), None, NOW) is None


def test_a_claimed_target_holds_the_vm_and_the_target_is_the_first_to_act() -> None:
    asked = live_migration.requested(running(), TARGET, NOW)
    assert asked is not None
    change = live_migration.target_claimed(asked.after, 1, TARGET)
    assert change is not None
    assert change.transition.capacity is Capacity.CLAIM
    assert (change.after.task, change.after.migration_target, change.after.hypervisor_id) == (
        Task.PREPARING,
        TARGET,
        SOURCE,
    )
    assert live_migration.target_claimed(asked.after, 2, TARGET) is None  # another migration's claim
    assert live_migration.target_claimed(change.after, 1, TARGET) is None  # claimed already
    order = live_migration.awaited(change.after)
    assert order is not None
    assert (order.host, order.command.action) == (TARGET, CommandAction.PREPARE_MIGRATION)
    assert order.command.migration == MigrationOrder(number=1, source=SOURCE, target=TARGET)


def test_prepare_handover_finish_move_the_vm_and_release_the_source_only_at_the_end() -> None:
    vm_record = claimed()
    prepared = on(vm_record, report(CommandAction.PREPARE_MIGRATION, ReportedStatus.PREPARED, TARGET))
    assert prepared is not None
    assert prepared.change.after.task is Task.HANDING_OVER
    assert prepared.change.transition.capacity is Capacity.KEEP
    assert orders(prepared) == [(SOURCE, CommandAction.MIGRATE)]
    handed = on(prepared.change.after, report(CommandAction.MIGRATE, ReportedStatus.HANDED_OVER, SOURCE))
    assert handed is not None
    assert handed.change.after.task is Task.FINISHING
    assert handed.change.transition.capacity is Capacity.KEEP
    assert orders(handed) == [(TARGET, CommandAction.FINISH_MIGRATION)]
    done = on(handed.change.after, report(CommandAction.FINISH_MIGRATION, ReportedStatus.RUNNING, TARGET))
    assert done is not None
    assert done.migrated
    after = done.change.after
    assert (after.status, after.hypervisor_id, after.migration_target, after.task) == (
        VmStatus.RUNNING,
        TARGET,
        None,
        None,
    )
    assert done.change.transition.capacity is Capacity.RELEASE
    assert done.change.released_from == SOURCE
    assert orders(done) == [(SOURCE, CommandAction.CLEANUP_MIGRATION)]
    # The source stays in the VM's history: its agent's report of the copy it cleaned up is heard.
    assert [(entry["host"], entry["outcome"]) for entry in after.attempts] == [(SOURCE, "migrated")]
    assert placed_on(after, SOURCE)


@pytest.mark.parametrize(
    ("task", "action", "host", "told"),
    [
        (Task.PREPARING, CommandAction.PREPARE_MIGRATION, TARGET, [(TARGET, CommandAction.ABORT_MIGRATION)]),
        (
            Task.HANDING_OVER,
            CommandAction.MIGRATE,
            SOURCE,
            [(TARGET, CommandAction.ABORT_MIGRATION), (SOURCE, CommandAction.ROLLBACK_MIGRATION)],
        ),
        (
            Task.FINISHING,
            CommandAction.FINISH_MIGRATION,
            TARGET,
            [(TARGET, CommandAction.ABORT_MIGRATION), (SOURCE, CommandAction.ROLLBACK_MIGRATION)],
        ),
    ],
)
def test_a_failed_step_rolls_back_to_the_source_and_gives_the_target_back(
    task: Task, action: CommandAction, host: str, told: list[tuple[str, CommandAction]]
) -> None:
    step = on(claimed(task), report(action, ReportedStatus.FAILED, host, message="disk full"))
    assert step is not None
    after = step.change.after
    engaged = task is not Task.PREPARING  # the source was told to hand over: it must say it runs the VM
    assert (after.status, after.hypervisor_id, after.task) == (
        VmStatus.RUNNING,
        SOURCE,
        Task.ROLLING_BACK if engaged else None,
    )
    assert after.migration_target == (TARGET if engaged else None)  # named for the rollback, holding nothing
    assert step.change.transition.capacity is Capacity.RELEASE_TARGET
    assert step.change.released_from == TARGET
    assert orders(step) == told
    assert step.failed == (action.value, f"{action.value} failed on {host}: disk full")
    assert after.status_reason is not None
    assert "disk full" in after.status_reason


def test_the_source_ends_a_rollback_by_running_the_vm_or_the_vm_fails() -> None:
    rolled = on(claimed(Task.FINISHING), report(CommandAction.FINISH_MIGRATION, ReportedStatus.FAILED, TARGET))
    assert rolled is not None
    rolling = rolled.change.after
    order = live_migration.awaited(rolling)
    assert order is not None
    assert (order.host, order.command.action) == (SOURCE, CommandAction.ROLLBACK_MIGRATION)  # sent again if lost
    assert live_migration.outcome(rolling, 1, SOURCE) is live_migration.Outcome.ROLLED_BACK
    assert on(rolling, report(CommandAction.ROLLBACK_MIGRATION, ReportedStatus.RUNNING, TARGET)) is None
    resumed = on(rolling, report(CommandAction.ROLLBACK_MIGRATION, ReportedStatus.RUNNING, SOURCE))
    assert resumed is not None
    assert (resumed.change.after.task, resumed.change.after.migration_target) == (None, None)
    assert resumed.change.transition.capacity is Capacity.KEEP
    assert live_migration.awaited(resumed.change.after) is None
    lost = on(rolling, report(CommandAction.ROLLBACK_MIGRATION, ReportedStatus.FAILED, SOURCE, message="gone"))
    assert lost is not None
    assert (lost.change.after.status, lost.change.after.task) == (VmStatus.FAILED, None)
    assert lost.change.transition.capacity is Capacity.RELEASE
    assert lost.change.released_from == SOURCE


def test_reports_of_another_step_host_or_migration_change_nothing() -> None:
    preparing = claimed(Task.PREPARING)
    assert on(preparing, report(CommandAction.PREPARE_MIGRATION, ReportedStatus.PREPARED, SOURCE)) is None
    assert on(preparing, report(CommandAction.MIGRATE, ReportedStatus.HANDED_OVER, SOURCE)) is None
    assert on(preparing, report(CommandAction.PREPARE_MIGRATION, ReportedStatus.PREPARED, TARGET, number=2)) is None
    finishing = claimed(Task.FINISHING)
    assert on(finishing, report(CommandAction.PREPARE_MIGRATION, ReportedStatus.PREPARED, TARGET)) is None  # a repeat
    assert on(running(), report(CommandAction.FINISH_MIGRATION, ReportedStatus.RUNNING, TARGET)) is None


def test_a_migration_in_flight_too_long_is_rolled_back_with_or_without_a_target() -> None:
    held = replace(claimed(Task.HANDING_OVER), task_since=claimed().task_since)
    assert live_migration.timed_out(held, NOW + 10, 600) is None
    late = live_migration.timed_out(held, NOW + 600, 600)
    assert late is not None
    assert late.change.transition.event is Event.MIGRATION_TIMED_OUT
    assert late.change.transition.capacity is Capacity.RELEASE_TARGET
    assert orders(late) == [(TARGET, CommandAction.ABORT_MIGRATION), (SOURCE, CommandAction.ROLLBACK_MIGRATION)]
    assert late.failed is not None
    assert late.failed[0] == live_migration.TIMEOUT
    asked = live_migration.requested(running(), None, NOW)
    assert asked is not None
    unanswered = live_migration.timed_out(asked.after, NOW + 601, 600)
    assert unanswered is not None
    assert unanswered.change.transition.capacity is Capacity.KEEP  # nothing was claimed
    assert unanswered.orders == ()
    assert unanswered.change.after.status is VmStatus.RUNNING


@pytest.mark.parametrize("task", [Task.PREPARING, Task.HANDING_OVER, Task.FINISHING])
def test_a_fenced_target_rolls_the_migration_back_at_once_as_a_failed_step(task: Task) -> None:
    step = live_migration.host_fenced(claimed(task), {TARGET}, NOW, exclude_for=600)
    assert step is not None
    after = step.change.after
    engaged = task is not Task.PREPARING
    assert (after.status, after.hypervisor_id) == (VmStatus.RUNNING, SOURCE)
    assert after.task is (Task.ROLLING_BACK if engaged else None)
    assert step.change.transition.event is Event.MIGRATION_FAILED
    assert step.change.released_from == TARGET
    assert step.then is None
    told = [(TARGET, CommandAction.ABORT_MIGRATION)]
    if engaged:  # the source was told to hand over: it keeps (or resumes) the VM
        told.append((SOURCE, CommandAction.ROLLBACK_MIGRATION))
    assert orders(step) == told
    assert step.failed == (live_migration.TARGET_FENCED, f"its target {TARGET} was fenced")


@pytest.mark.parametrize("task", [Task.PREPARING, Task.HANDING_OVER, Task.FINISHING])
def test_a_fenced_source_fails_the_vm_gives_both_shares_back_and_tells_only_the_target(task: Task) -> None:
    step = live_migration.host_fenced(claimed(task), {SOURCE, "hv-other"}, NOW, exclude_for=600)
    assert step is not None
    assert [change.released_from for change in step.changes] == [TARGET, SOURCE]
    failed = step.changes[-1].after
    assert (failed.status, failed.hypervisor_id, failed.task, failed.migration_target) == (
        VmStatus.FAILED,
        SOURCE,
        None,
        None,
    )
    assert failed.attempts[-1]["outcome"] == "host fenced"  # as the host's other VMs: restart policy applies
    assert SOURCE in failed.exclusions
    assert orders(step) == [(TARGET, CommandAction.ABORT_MIGRATION)]  # nothing to the source: it is down
    assert step.failed is not None
    assert step.failed[0] == live_migration.SOURCE_FENCED


def test_a_fenced_source_fails_a_vm_whose_target_is_not_chosen_yet_and_fencing_elsewhere_changes_nothing() -> None:
    asked = live_migration.requested(running(), None, NOW)
    assert asked is not None
    step = live_migration.host_fenced(asked.after, {SOURCE}, NOW, exclude_for=600)
    assert step is not None
    assert [change.released_from for change in step.changes] == [None, SOURCE]  # no target was claimed
    assert step.changes[-1].after.status is VmStatus.FAILED
    assert step.orders == ()
    assert live_migration.host_fenced(asked.after, {TARGET}, NOW, exclude_for=600) is None  # claimed nowhere yet
    assert live_migration.host_fenced(claimed(), {"hv-other"}, NOW, exclude_for=600) is None
    assert live_migration.host_fenced(running(), {SOURCE}, NOW, exclude_for=600) is None  # not migrating


def test_the_command_a_step_waits_on_is_the_one_sent_again() -> None:
    expected = {
        Task.PREPARING: (TARGET, CommandAction.PREPARE_MIGRATION),
        Task.HANDING_OVER: (SOURCE, CommandAction.MIGRATE),
        Task.FINISHING: (TARGET, CommandAction.FINISH_MIGRATION),
    }
    for task, (host, action) in expected.items():
        order = live_migration.awaited(claimed(task))
        assert isinstance(order, Order)
        assert (order.host, order.command.action) == (host, action)
        assert order.command.migration is not None
        assert (order.command.migration.source, order.command.migration.target) == (SOURCE, TARGET)
    asked = live_migration.requested(running(), None, NOW)
    assert asked is not None
    assert live_migration.awaited(asked.after) is None  # the scheduler's vm.migrate is what it waits on


def test_a_migration_s_outcome_is_read_from_the_vm_s_row() -> None:
    started = live_migration.requested(running(), None, NOW)
    assert started is not None
    assert live_migration.outcome(started.after, 1, SOURCE) is live_migration.Outcome.IN_FLIGHT
    done = on(claimed(Task.FINISHING), report(CommandAction.FINISH_MIGRATION, ReportedStatus.RUNNING, TARGET))
    failed = on(claimed(Task.PREPARING), report(CommandAction.PREPARE_MIGRATION, ReportedStatus.FAILED, TARGET))
    assert done is not None
    assert failed is not None
    assert live_migration.outcome(done.change.after, 1, SOURCE) is live_migration.Outcome.MOVED
    assert live_migration.outcome(failed.change.after, 1, SOURCE) is live_migration.Outcome.ROLLED_BACK


def test_stop_and_start_keep_the_host_and_wait_for_the_agent() -> None:
    stop = stop_requested(running(), NOW)
    assert stop is not None
    assert (stop.after.status, stop.after.task, stop.after.hypervisor_id) == (VmStatus.STOPPED, Task.STOPPING, SOURCE)
    assert stop.transition.capacity is Capacity.KEEP
    assert power_command(stop.after) is CommandAction.STOP
    done = power_reported(stop.after, SOURCE, CommandAction.STOP, ReportedStatus.STOPPED, "")
    assert done is not None
    assert (done.after.status, done.after.task, done.after.status_reason) == (VmStatus.STOPPED, None, None)
    assert stop_requested(done.after, NOW) is None  # stopped already
    start = start_requested(done.after, NOW)
    assert start is not None
    assert (start.after.status, start.after.task) == (VmStatus.RUNNING, Task.STARTING)
    failed = power_reported(start.after, SOURCE, CommandAction.START, ReportedStatus.FAILED, "no power")
    assert failed is not None
    assert failed.after.status is VmStatus.STOPPED
    assert failed.after.status_reason == f"start failed on {SOURCE}: no power"


def test_a_power_report_from_another_host_or_of_another_command_changes_nothing() -> None:
    stop = stop_requested(running(), NOW)
    assert stop is not None
    assert power_reported(stop.after, TARGET, CommandAction.STOP, ReportedStatus.STOPPED, "") is None
    assert power_reported(stop.after, SOURCE, CommandAction.START, ReportedStatus.RUNNING, "") is None
    assert power_reported(running(), SOURCE, CommandAction.STOP, ReportedStatus.STOPPED, "") is None


_ANY_REPORT = st.tuples(
    st.sampled_from(sorted(live_migration.EXPECTED.values(), key=lambda e: e.action.value)),
    st.sampled_from(
        [ReportedStatus.PREPARED, ReportedStatus.HANDED_OVER, ReportedStatus.RUNNING, ReportedStatus.FAILED]
    ),
    st.sampled_from([SOURCE, TARGET, "hv-other"]),
    st.sampled_from([1, 2]),
)


@given(st.lists(_ANY_REPORT, max_size=12))
@example(  # the whole way, then late repeats
    [
        (live_migration.EXPECTED[Task.PREPARING], True, TARGET, 1),
        (live_migration.EXPECTED[Task.HANDING_OVER], True, SOURCE, 1),
        (live_migration.EXPECTED[Task.FINISHING], True, TARGET, 1),
        (live_migration.EXPECTED[Task.PREPARING], True, TARGET, 1),
    ]
)
@example(
    [
        (live_migration.EXPECTED[Task.PREPARING], True, TARGET, 1),
        (live_migration.EXPECTED[Task.FINISHING], True, TARGET, 1),
    ]
)
def test_whatever_agents_report_a_migration_ends_on_one_host_holding_one_share(
    reports: list[tuple[live_migration.Expected, ReportedStatus, str, int]],
) -> None:
    """Any reports, in any order, repeated, from any host: the VM is migrating (holding its source
    and its target) or running on exactly one of the two; it runs on the target only after the
    target prepared, the source handed over and the target took it, in that order."""
    current = claimed()
    shares = 2  # source and target
    accepted: list[tuple[CommandAction, str]] = []
    for expected, done, host, number in reports:
        status = expected.success if done else ReportedStatus.FAILED
        step = on(current, report(expected.action, status, host, number=number))
        if step is None:
            continue
        capacity = step.change.transition.capacity
        shares += {Capacity.KEEP: 0, Capacity.RELEASE: -1, Capacity.RELEASE_TARGET: -1, Capacity.CLAIM: 1}[capacity]
        if status is not ReportedStatus.FAILED:
            accepted.append((expected.action, host))
        current = step.change.after
        if current.status is not VmStatus.MIGRATING:
            break
    if current.status is VmStatus.MIGRATING:
        assert shares == 2
        assert (current.hypervisor_id, current.migration_target) == (SOURCE, TARGET)
    else:
        assert current.status is VmStatus.RUNNING
        assert shares == 1
        rolling_back = current.task is Task.ROLLING_BACK  # the target stays named, holding nothing
        assert current.migration_target == (TARGET if rolling_back else None)
        moved = [
            (CommandAction.PREPARE_MIGRATION, TARGET),
            (CommandAction.MIGRATE, SOURCE),
            (CommandAction.FINISH_MIGRATION, TARGET),
        ]
        assert current.hypervisor_id == (TARGET if accepted == moved else SOURCE)
