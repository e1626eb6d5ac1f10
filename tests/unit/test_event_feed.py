"""What a client of GET /v1/events gets of each event: its types, its project's VMs, ids that resume."""

from __future__ import annotations

import pytest

from vmsched_api.event_feed import FROM_NOW, EventFilter, sse, start_offset, visible

ASSIGNED = {
    "assignments": [
        {"vm_id": "a", "project": "blue"},
        {"vm_id": "b", "project": "green"},
    ]
}


def test_without_filters_every_event_is_shown_whole() -> None:
    assert visible("vm.assigned", ASSIGNED, EventFilter()) == ASSIGNED
    assert visible("vm.status", {"vm_id": "a", "status": "running"}, EventFilter()) is not None


def test_a_project_sees_only_its_vms_of_a_shared_message() -> None:
    shown = visible("vm.assigned", ASSIGNED, EventFilter(project="blue"))
    assert shown == {"assignments": [{"vm_id": "a", "project": "blue"}]}
    assert visible("vm.assigned", ASSIGNED, EventFilter(project="red")) is None


def test_events_naming_one_project_are_shown_to_that_project_only() -> None:
    deleted = {"vm_id": "a", "project": "blue"}
    assert visible("vm.deleted", deleted, EventFilter(project="blue")) == deleted
    assert visible("vm.deleted", deleted, EventFilter(project="green")) is None


def test_an_event_naming_no_project_is_not_a_projects_to_see() -> None:
    assert visible("vm.status", {"vm_id": "a", "status": "running"}, EventFilter(project="blue")) is None


def test_a_vm_without_a_project_reads_as_the_default_project() -> None:
    old = {"vms": [{"vm_id": "a"}]}
    assert visible("vm.unschedulable", old, EventFilter(project="default")) == old


def test_types_filter_by_routing_key() -> None:
    only = EventFilter(types=frozenset({"vm.unschedulable"}))
    assert visible("vm.assigned", ASSIGNED, only) is None
    assert visible("vm.unschedulable", {"vms": []}, only) == {"vms": []}


def test_last_event_id_resumes_right_after_it() -> None:
    assert start_offset(None) == FROM_NOW
    assert start_offset(" ") == FROM_NOW
    assert start_offset("41") == 42
    for bad in ("-1", "x"):
        with pytest.raises(ValueError, match=r"offset|invalid literal"):
            start_offset(bad)


def test_an_event_is_framed_with_its_offset_type_and_one_line_of_json() -> None:
    assert sse(7, "vm.deleted", {"vm_id": "a"}) == 'id: 7\nevent: vm.deleted\ndata: {"vm_id":"a"}\n\n'
