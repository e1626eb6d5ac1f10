"""What each lifecycle event does to a VM's record (pure: no servers)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

from vmsched_contract.messages import HostSelectorTerm, Resources, RestartPolicy, SelectorOperator
from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import (
    agent_delete_failed,
    agent_deleted,
    agent_failed,
    delete_requested,
    host_fenced,
    host_lost,
    host_returned,
    restart,
)

NOW = 1_700_000_000.0


def vm(status: VmStatus = VmStatus.SCHEDULED, host: str | None = "hv-1", **fields: object) -> VmRecord:
    base = VmRecord(
        id=uuid.uuid4(),
        name="web-1",
        status=status,
        status_reason=None,
        hypervisor_id=host,
        resources=Resources(cpu=2, memory_mb=2048, disk_gb=20),
        labels={},
        strategy=None,
        restart_policy=RestartPolicy.ON_FAILURE,
        restart_count=0,
        attempt=1,
        failures=0,
        exclusions={},
        attempts=[],
        placement=None,
        created_at=None,
        scheduled_at=datetime.fromtimestamp(NOW - 10, UTC),
        started_at=None,
        failed_at=None,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def test_a_refused_create_is_retried_elsewhere_with_the_host_excluded_for_a_while() -> None:
    change = agent_failed(vm(), "hv-1", "no room", NOW, max_attempts=3, exclude_for=600)
    assert change is not None
    after = change.after
    assert (after.status, after.hypervisor_id, after.attempt, after.failures) == (VmStatus.PENDING, None, 2, 1)
    assert after.exclusions == {"hv-1": NOW + 600}
    assert after.to_place(NOW + 599).exclude_hosts == ["hv-1"]
    assert after.to_place(NOW + 601).exclude_hosts == []  # the exclusion expired
    assert change.released_from == "hv-1"


def test_a_vm_placed_again_keeps_its_host_selector() -> None:
    selector = (HostSelectorTerm(key="zone", operator=SelectorOperator.IN, values=["z1"]),)
    failed = agent_failed(vm(host_selector=selector), "hv-1", "no room", NOW, max_attempts=3, exclude_for=600)
    assert failed is not None
    assert failed.after.to_place(NOW).host_selector == list(selector)
    silent = vm(host_selector=selector, status=VmStatus.UNKNOWN, started_at=datetime.fromtimestamp(NOW - 5, UTC))
    lost = host_lost(silent, NOW, exclude_for=600)
    assert lost is not None
    restarted = restart(lost.after)
    assert restarted is not None
    assert restarted.after.to_place(NOW + 60).host_selector == list(selector)


def test_the_last_attempt_fails_the_vm_listing_every_host_tried() -> None:
    tried = [{"attempt": 1, "host": "hv-0", "outcome": "failed", "message": "disk full"}]
    change = agent_failed(
        vm(failures=2, attempt=3, attempts=tried), "hv-1", "no room", NOW, max_attempts=3, exclude_for=600
    )
    assert change is not None
    assert change.after.status is VmStatus.FAILED
    assert change.after.status_reason == "failed on every attempt (3): #1 hv-0: disk full; #3 hv-1: no room"


def test_restarts_do_not_use_up_the_attempts_meant_for_placement() -> None:
    ran = vm(VmStatus.RUNNING, started_at=datetime.fromtimestamp(NOW - 5, UTC), failures=2)
    died = agent_failed(ran, "hv-1", "kernel panic", NOW, max_attempts=3, exclude_for=600)
    assert died is not None
    back = restart(died.after)
    assert back is not None
    assert (back.after.status, back.after.restart_count, back.after.failures) == (VmStatus.PENDING, 1, 0)
    assert back.after.attempt == ran.attempt + 1
    assert "hv-1" in back.after.exclusions


def test_a_report_from_another_host_or_a_late_one_changes_nothing() -> None:
    assert agent_failed(vm(), "hv-2", "no", NOW, max_attempts=3, exclude_for=600) is None
    assert agent_deleted(vm(VmStatus.RUNNING), "hv-1", NOW) is None
    assert agent_delete_failed(vm(VmStatus.RUNNING), "hv-1", "busy") is None


def test_a_silent_hosts_vm_settles_by_what_its_heartbeat_lists() -> None:
    listed = host_returned(vm(VmStatus.UNKNOWN), True, NOW)
    never_ran = host_returned(vm(VmStatus.UNKNOWN), False, NOW)
    lost = host_returned(vm(VmStatus.UNKNOWN, started_at=datetime.fromtimestamp(NOW - 60, UTC)), False, NOW)
    assert [c.after.status if c else None for c in (listed, never_ran, lost)] == [
        VmStatus.RUNNING,
        VmStatus.SCHEDULED,
        VmStatus.FAILED,
    ]
    assert [c.released_from if c else None for c in (listed, never_ran, lost)] == [None, None, "hv-1"]


def test_a_heartbeat_taken_before_the_vm_started_says_nothing_of_it() -> None:
    started = datetime.fromtimestamp(NOW - 10, UTC)
    unknown = vm(VmStatus.UNKNOWN, started_at=started)
    assert host_returned(unknown, False, NOW, heard_at=NOW - 30) is None  # taken before the start
    assert host_returned(unknown, False, NOW, heard_at=NOW - 9) is None  # within the clocks' skew
    lost = host_returned(unknown, False, NOW, heard_at=NOW)
    assert lost is not None
    assert lost.after.status is VmStatus.FAILED
    listed = host_returned(unknown, True, NOW, heard_at=NOW - 30)  # what it lists is there, whenever taken
    assert listed is not None
    assert listed.after.status is VmStatus.RUNNING


def test_a_lost_host_fails_unknown_vms_and_deletes_deleting_ones() -> None:
    failed = host_lost(vm(VmStatus.UNKNOWN), NOW, exclude_for=600)
    deleted = host_lost(vm(VmStatus.DELETING), NOW, exclude_for=600)
    assert failed is not None
    assert deleted is not None
    assert (failed.after.status, deleted.after.status) == (VmStatus.FAILED, VmStatus.DELETED)
    assert host_lost(vm(VmStatus.RUNNING), NOW, exclude_for=600) is None  # only after it went unknown


def test_a_fenced_host_fails_every_vm_it_holds_at_once_and_a_restart_goes_elsewhere_first() -> None:
    ran = datetime.fromtimestamp(NOW - 5, UTC)
    for status in (VmStatus.RUNNING, VmStatus.SCHEDULED, VmStatus.UNKNOWN, VmStatus.STOPPED):
        change = host_fenced(vm(status, started_at=ran), NOW, exclude_for=600)
        assert change is not None, status
        assert change.after.status is VmStatus.FAILED
        assert change.released_from == "hv-1"
        assert change.after.exclusions == {"hv-1": NOW + 600}
        assert change.after.status_reason == "host fenced: hv-1 was declared down"
        back = restart(change.after)
        assert back is not None
        assert back.after.status is VmStatus.PENDING
    deleting = host_fenced(vm(VmStatus.DELETING), NOW, exclude_for=600)
    assert deleting is not None
    assert deleting.after.status is VmStatus.DELETED
    assert host_fenced(vm(VmStatus.FAILED), NOW, exclude_for=600) is None  # nothing held any more


def test_deleting_a_vm_on_no_host_ends_it_at_once_and_one_on_a_host_asks_its_agent() -> None:
    at_once = delete_requested(vm(VmStatus.UNSCHEDULABLE, host=None))
    asked = delete_requested(vm(VmStatus.UNKNOWN))
    assert at_once is not None
    assert asked is not None
    assert (at_once.after.status, asked.after.status) == (VmStatus.DELETED, VmStatus.DELETING)
    assert delete_requested(vm(VmStatus.DELETED)) is None
