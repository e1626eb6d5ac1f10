"""Where a preemption's victims went, as the replay tells it (vmsched_api.preemption_fates)."""

from __future__ import annotations

import uuid

from tests.unit.test_vm_changes import vm
from vmsched_api.preemption_fates import fates, where_now
from vmsched_contract.messages import PreemptionOutcome
from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord

MOVED, DELETED = PreemptionOutcome.MOVED, PreemptionOutcome.DELETED


def victim(status: VmStatus, host: str | None = "h1", target: str | None = None) -> VmRecord:
    return vm(status, host, migration_target=target)


def test_a_moved_victim_is_where_it_runs_now() -> None:
    assert where_now(victim(VmStatus.RUNNING, "h2"), MOVED) == "h2"


def test_a_victim_still_moving_is_told_by_the_target_claimed_for_it() -> None:
    assert where_now(victim(VmStatus.MIGRATING, "h1", "h2"), MOVED) == "h2"
    assert where_now(victim(VmStatus.MIGRATING, "h1", None), MOVED) is None  # the target is not chosen yet


def test_a_deleted_victim_restarted_elsewhere_is_where_it_was_restarted() -> None:
    assert where_now(victim(VmStatus.RUNNING, "h3"), DELETED) == "h3"
    assert where_now(victim(VmStatus.MIGRATING, "h3", "h4"), DELETED) == "h3"  # still runs on its source


def test_a_victim_that_runs_nowhere_is_nowhere() -> None:
    for status in (VmStatus.PREEMPTED, VmStatus.DELETING, VmStatus.DELETED, VmStatus.FAILED, VmStatus.WAITING):
        assert where_now(victim(status, "h1"), DELETED) is None, status


def test_fates_keep_the_victims_order_and_tell_a_missing_row_as_gone() -> None:
    moved, rolled_back = victim(VmStatus.RUNNING, "h2"), victim(VmStatus.FAILED, "h1")
    gone = uuid.uuid4()
    told = fates(
        [gone, moved.id, rolled_back.id],
        "h1",
        MOVED,
        {moved.id: moved, rolled_back.id: rolled_back},
        deleted_later=frozenset({rolled_back.id}),
    )
    assert [(f.vm_id, f.outcome, f.status, f.host) for f in told] == [
        (gone, MOVED, None, None),
        (moved.id, MOVED, VmStatus.RUNNING, "h2"),
        (rolled_back.id, DELETED, VmStatus.FAILED, None),
    ]
    assert {f.from_host for f in told} == {"h1"}


def test_a_victim_stopped_on_its_new_host_is_still_there() -> None:
    assert where_now(victim(VmStatus.STOPPED, "h2"), MOVED) == "h2"
