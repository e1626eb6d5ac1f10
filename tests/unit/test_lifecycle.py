"""The lifecycle table: well formed, shown as it is in docs/lifecycle.md, and followed by choose()."""

from __future__ import annotations

import pytest

from devtools.docs import LIFECYCLE, with_table
from vmsched_contract.status import VmStatus
from vmsched_domain.lifecycle import (
    HOLDS_CAPACITY,
    HOLDS_TARGET,
    TRANSITIONS,
    Capacity,
    Condition,
    Event,
    IllegalTransition,
    Transition,
    choose,
    sources,
    sql_in,
    transition,
)


def test_docs_lifecycle_shows_the_table_of_the_code() -> None:
    page = LIFECYCLE.read_text()
    assert with_table(page) == page, "docs/lifecycle.md differs from vmsched_domain.lifecycle: run `make docs`"


def test_no_event_has_two_transitions_for_the_same_status_and_facts() -> None:
    keys = [(t.event, t.source, t.when) for t in TRANSITIONS]
    assert len(keys) == len(set(keys))


# Whether a migrating VM holds its target's share before and after a transition (the table's facts
# about migrations, written out as a second opinion): no target until target_claimed, none once the
# VM is back to running, and none in the transitions that say "no target".
_NO_TARGET_BEFORE = {Event.MIGRATE_REQUESTED, Event.TARGET_CLAIMED, Event.NO_TARGET}


def _shares(t: Transition) -> tuple[int, int]:
    """How many hosts' shares the VM holds before and after ``t``."""
    held_before = t.event not in _NO_TARGET_BEFORE and t.when is not Condition.NO_TARGET_YET
    held_after = t.event is not Event.MIGRATE_REQUESTED
    before = (t.source in HOLDS_CAPACITY) + (t.source in HOLDS_TARGET and held_before)
    after = (t.target in HOLDS_CAPACITY) + (t.target in HOLDS_TARGET and held_after)
    return before, after


def test_capacity_is_claimed_only_by_placing_or_claiming_a_target_and_released_one_share_at_a_time() -> None:
    for t in TRANSITIONS:
        before, after = _shares(t)
        if t.capacity is Capacity.CLAIM:
            assert t.event in (Event.PLACED, Event.TARGET_CLAIMED), t
            assert after == before + 1, t
        elif t.capacity in (Capacity.RELEASE, Capacity.RELEASE_TARGET):
            assert after == before - 1, t
        else:
            assert before == after, f"{t} changes what the VM holds without saying so"


def test_a_migration_releases_the_source_only_when_the_target_runs_it() -> None:
    releasing = {t.event for t in TRANSITIONS if t.source is VmStatus.MIGRATING and t.capacity is Capacity.RELEASE}
    assert releasing == {Event.TARGET_RUNNING}
    for t in TRANSITIONS:
        if t.source is VmStatus.MIGRATING and t.target is not VmStatus.MIGRATING:
            assert t.target is VmStatus.RUNNING, f"{t}: a migration ends with the VM running, here or there"


def test_a_migrating_vm_is_never_preempted() -> None:
    # It holds two hosts' shares and two agents are busy with it: preemption takes only VMs that
    # hold one share and nothing in flight (the residents query reads these sources).
    assert VmStatus.MIGRATING not in {t.source for t in TRANSITIONS if t.event is Event.PREEMPTED}


def test_a_stopped_vm_keeps_its_host_share() -> None:
    """Until it is deleted, or its host is fenced (down for sure: the VM fails and may restart elsewhere)."""
    assert VmStatus.STOPPED in HOLDS_CAPACITY
    for t in TRANSITIONS:
        if VmStatus.STOPPED in (t.source, t.target) and t.event not in (Event.DELETE_REQUESTED, Event.HOST_FENCED):
            assert t.capacity is Capacity.KEEP, t


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
