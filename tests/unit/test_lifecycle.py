"""The lifecycle table: well formed, shown as it is in docs/lifecycle.md, and followed by choose()."""

from __future__ import annotations

import pytest

from devtools.docs import LIFECYCLE, with_table
from vmsched_common.lifecycle import (
    HOLDS_CAPACITY,
    TRANSITIONS,
    Capacity,
    Condition,
    Event,
    IllegalTransition,
    VmStatus,
    choose,
    sources,
    sql_in,
    transition,
)


def test_docs_lifecycle_shows_the_table_of_the_code() -> None:
    page = LIFECYCLE.read_text()
    assert with_table(page) == page, "docs/lifecycle.md differs from vmsched_common.lifecycle: run `make docs`"


def test_no_event_has_two_transitions_for_the_same_status_and_facts() -> None:
    keys = [(t.event, t.source, t.when) for t in TRANSITIONS]
    assert len(keys) == len(set(keys))


def test_capacity_is_claimed_only_by_placing_and_released_only_out_of_a_status_that_holds_it() -> None:
    for t in TRANSITIONS:
        holds_before, holds_after = t.source in HOLDS_CAPACITY, t.target in HOLDS_CAPACITY
        if t.capacity is Capacity.CLAIM:
            assert (t.event, holds_before, holds_after) == (Event.PLACED, False, True)
        elif t.capacity is Capacity.RELEASE:
            assert (holds_before, holds_after) == (True, False), t
        else:
            assert holds_before == holds_after, f"{t} changes what the VM holds without saying so"


def test_every_status_is_reachable_from_pending_and_only_deleted_is_terminal() -> None:
    reached = {VmStatus.PENDING}
    while True:
        more = {t.target for t in TRANSITIONS if t.source in reached} - reached
        if not more:
            break
        reached |= more
    assert reached == set(VmStatus)
    assert {s for s in VmStatus if not any(t.source is s for t in TRANSITIONS)} == {VmStatus.DELETED}


def test_a_silent_host_never_fails_or_deletes_a_vm() -> None:
    for t in TRANSITIONS:
        if t.event is Event.HOST_SILENT:
            assert t.target is VmStatus.UNKNOWN
            assert t.capacity is Capacity.KEEP


def test_choose_picks_by_the_facts_and_ignores_what_does_not_apply() -> None:
    retry = choose(Event.AGENT_FAILED, VmStatus.SCHEDULED, [Condition.RETRIES_LEFT])
    give_up = choose(Event.AGENT_FAILED, VmStatus.SCHEDULED, [Condition.NO_RETRIES_LEFT])
    assert retry is not None
    assert give_up is not None
    assert (retry.target, give_up.target) == (VmStatus.PENDING, VmStatus.FAILED)
    assert choose(Event.AGENT_RUNNING, VmStatus.DELETED) is None  # a late report changes nothing
    with pytest.raises(IllegalTransition, match="placed from running"):
        transition(Event.PLACED, VmStatus.RUNNING)


@pytest.mark.parametrize(("event", "expected"), [(Event.HOST_SILENT, "('scheduled', 'running')")])
def test_sources_are_written_for_sql_in_the_order_of_the_statuses(event: Event, expected: str) -> None:
    assert sql_in(sources(event)) == expected
    with pytest.raises(ValueError, match="empty"):
        sql_in([])


def test_every_event_has_a_transition() -> None:
    assert {t.event for t in TRANSITIONS} == set(Event)
