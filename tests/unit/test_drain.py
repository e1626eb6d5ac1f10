"""A drain's next step and its progress (pure: no servers)."""

from __future__ import annotations

import uuid
from dataclasses import replace

from tests.unit.test_vm_changes import NOW, vm
from vmsched_contract.status import DrainState, Task, VmStatus
from vmsched_domain import live_migration
from vmsched_domain.disruption import Budget
from vmsched_domain.drain import RETRY_AFTER, Drain, step
from vmsched_domain.records import VmRecord

HOST, ELSEWHERE = "hv-maint", "hv-other"


def drain(**fields: object) -> Drain:
    base = Drain(host_id=HOST, evacuate=True, max_parallel=2, deadline=NOW + 600, state=DrainState.DRAINING)
    return replace(base, **fields)  # type: ignore[arg-type]


def running(host: str = HOST) -> VmRecord:
    return vm(VmStatus.RUNNING, host)


def migrating(record: VmRecord) -> VmRecord:
    """``record``'s next migration, its target claimed elsewhere."""
    asked = live_migration.requested(record, None, NOW)
    assert asked is not None
    claimed = live_migration.target_claimed(asked.after, asked.after.migrations, ELSEWHERE)
    assert claimed is not None
    return claimed.after


def test_an_empty_host_is_drained() -> None:
    planned = step(drain(), [], NOW)
    assert (planned.start, planned.progress.state) == ([], DrainState.DRAINED)


def test_at_most_max_parallel_migrations_are_in_flight_the_rest_queued() -> None:
    vms = [running() for _ in range(5)]
    first = step(drain(), vms, NOW)
    assert len(first.start) == 2
    assert len(first.progress.queued) == 3
    started = {str(vm_id): 1 for vm_id in first.start}
    now_moving = [migrating(v) if v.id in first.start else v for v in vms]
    second = step(drain(started=started), now_moving, NOW + 1)
    assert second.start == []  # both slots taken
    assert sorted(second.progress.in_flight) == sorted(first.start)


def test_a_vm_that_moved_counts_as_moved_and_frees_its_slot() -> None:
    a, b, c = running(), running(), running()
    moved = replace(a, hypervisor_id=ELSEWHERE, migrations=1)  # its migration 1 is done
    planned = step(drain(started={str(a.id): 1}), [moved, b, c], NOW)
    assert [(m.vm_id, m.to) for m in planned.progress.moved] == [(a.id, ELSEWHERE)]
    assert sorted(planned.start) == sorted([b.id, c.id])


def test_a_rolled_back_migration_is_stuck_with_its_reason_then_tried_again() -> None:
    a = replace(running(), migrations=1, status_reason="migration 1 rolled back: no host fits (cpu)")
    planned = step(drain(started={str(a.id): 1}), [a], NOW)
    assert planned.start == []
    assert [(s.vm_id, s.reason) for s in planned.progress.stuck] == [(a.id, a.status_reason)]
    assert planned.progress.state is DrainState.DRAINING
    later = step(drain(started={str(a.id): 1}, failures=planned.failures), [a], NOW + RETRY_AFTER)
    assert later.start == [a.id]
    assert str(a.id) not in later.failures  # its next outcome is recorded anew


def test_vms_that_cannot_migrate_are_listed_with_the_reason_and_never_started() -> None:
    stopped = vm(VmStatus.STOPPED, HOST)
    silent = vm(VmStatus.UNKNOWN, HOST)
    starting = replace(running(), task=Task.STARTING)
    arriving = replace(migrating(running(ELSEWHERE)), migration_target=HOST)
    planned = step(drain(), [stopped, silent, starting, arriving], NOW)
    assert planned.start == []
    reasons = {s.vm_id: s.reason for s in planned.progress.stuck}
    assert set(reasons) == {stopped.id, silent.id, starting.id, arriving.id}
    assert reasons[stopped.id].startswith("stopped")
    assert planned.progress.state is DrainState.DRAINING  # they still hold a share of the host


def test_past_the_deadline_nothing_starts_and_what_is_left_stays_running_there() -> None:
    a, b = running(), running()
    moving = migrating(b)
    planned = step(drain(started={str(b.id): moving.migrations}), [a, moving], NOW + 601)
    assert planned.start == []
    assert planned.progress.state is DrainState.DRAINING  # one still in flight: it may land
    assert [s.vm_id for s in planned.progress.stuck] == [a.id]
    done = step(drain(), [a], NOW + 601)
    assert done.progress.state is DrainState.TIMED_OUT
    assert [s.vm_id for s in done.progress.stuck] == [a.id]


def test_without_evacuate_the_drain_only_waits() -> None:
    a = running()
    planned = step(drain(evacuate=False), [a], NOW)
    assert planned.start == []
    assert planned.progress.stuck[0].reason.startswith("evacuate is false")
    assert step(drain(evacuate=False), [], NOW).progress.state is DrainState.DRAINED


def test_deleted_vms_are_neither_moved_nor_stuck() -> None:
    gone = vm(VmStatus.DELETED, HOST)
    planned = step(drain(started={str(gone.id): 0}), [gone], NOW)
    assert planned.progress.state is DrainState.DRAINED
    assert planned.progress.moved == []


def test_migrations_away_not_started_by_the_drain_take_slots_too() -> None:
    theirs = migrating(running())  # someone's own POST .../migrate
    planned = step(drain(max_parallel=2), [theirs, running(), running()], NOW)
    assert len(planned.start) == 1


def test_a_member_whose_group_has_no_budget_left_is_stuck_and_each_start_takes_one_unit() -> None:
    group = uuid.uuid4()
    members = [replace(running(), server_group=group) for _ in range(3)]
    wide = drain(max_parallel=4)
    planned = step(wide, members, NOW, {group: Budget(group, 1, 0)})
    assert len(planned.start) == 1  # one unit left: one member moves, the others wait for it
    assert [s.reason.split(":")[0] for s in planned.progress.stuck] == ["disruption_budget"] * 2
    assert step(wide, members, NOW, {group: Budget(group, 1, 1)}).start == []  # a member is down already
    assert len(step(wide, members, NOW, {group: Budget(group, None, 3)}).start) == 3  # no budget: no limit
    assert len(step(wide, members, NOW).start) == 3
