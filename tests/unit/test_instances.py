"""One agent process per host id: a second one is refused while the holder is online; the host id
changes hands when the holder leaves or has been silent for the offline timeout."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from vmsched_contract.messages import AgentHeartbeat, Resources
from vmsched_gateway.instances import FREE, ConflictNotices, Holder, accepts, settle

TAKEOVER = 15.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def beat(host: str, instance: str | None, at: float = 0.0, *, leaving: bool = False, cpu: int = 8) -> AgentHeartbeat:
    return AgentHeartbeat(
        agent_id=host,
        instance_id=instance,
        leaving=leaving,
        capacity=Resources(cpu=cpu, memory_mb=8192, disk_gb=100),
        sent_at=T0 + timedelta(seconds=at),
    )


def test_a_new_host_is_taken_by_whoever_comes_first() -> None:
    assert accepts(FREE, "a", TAKEOVER)
    assert accepts(FREE, None, TAKEOVER)


def test_the_holder_keeps_its_host() -> None:
    assert accepts(Holder("a", silent_for=1.0), "a", TAKEOVER)


def test_a_second_process_is_refused_while_the_holder_is_online() -> None:
    assert not accepts(Holder("a", silent_for=0.0), "b", TAKEOVER)
    assert not accepts(Holder("a", silent_for=TAKEOVER - 0.001), "b", TAKEOVER)


def test_a_restart_after_a_crash_takes_over_once_the_old_process_is_silent_for_the_offline_timeout() -> None:
    assert accepts(Holder("a", silent_for=TAKEOVER), "b", TAKEOVER)
    assert accepts(Holder("a", silent_for=math.inf), "b", TAKEOVER)


def test_an_agent_too_old_to_name_itself_is_refused_while_a_named_one_holds_the_host() -> None:
    assert not accepts(Holder("a", silent_for=1.0), None, TAKEOVER)
    assert accepts(Holder(None, silent_for=1.0), None, TAKEOVER)  # and keeps working where none does


def test_a_stopping_agents_goodbye_frees_the_host_for_its_successor_in_the_same_batch() -> None:
    held = {"hv1": Holder("a", silent_for=1.0)}
    settled = settle(held, [beat("hv1", "b", at=2.0, cpu=16), beat("hv1", "a", at=1.0, leaving=True)], TAKEOVER)
    assert settled.refused == []
    assert settled.accepted["hv1"].instance_id == "b"  # the newest accepted one is what is folded
    assert settled.holders["hv1"].instance_id == "b"


def test_a_goodbye_alone_leaves_the_host_free() -> None:
    settled = settle({"hv1": Holder("a", 1.0)}, [beat("hv1", "a", leaving=True)], TAKEOVER)
    assert settled.holders["hv1"] == Holder(None, 0.0)


def test_a_duplicates_goodbye_frees_nothing() -> None:
    settled = settle({"hv1": Holder("a", 1.0)}, [beat("hv1", "b", leaving=True), beat("hv1", "c", at=1)], TAKEOVER)
    assert [refused.beat.instance_id for refused in settled.refused] == ["b", "c"]
    assert {refused.held_by for refused in settled.refused} == {"a"}
    assert "hv1" not in settled.accepted


def test_two_new_processes_in_one_batch_the_first_sent_wins() -> None:
    settled = settle({}, [beat("hv1", "late", at=5.0), beat("hv1", "early", at=1.0)], TAKEOVER)
    assert settled.accepted["hv1"].instance_id == "early"
    assert [refused.beat.instance_id for refused in settled.refused] == ["late"]


instances = st.sampled_from(["a", "b", "c", None])
beats_of_one_host = st.lists(
    st.tuples(instances, st.floats(0, 100), st.booleans()).map(lambda t: beat("hv1", t[0], t[1], leaving=t[2])),
    max_size=20,
)


@given(beats=beats_of_one_host, silent_for=st.floats(0, TAKEOVER, exclude_max=True))
def test_an_online_holder_is_never_displaced_until_it_says_goodbye(
    beats: list[AgentHeartbeat], silent_for: float
) -> None:
    settled = settle({"hv1": Holder("a", silent_for)}, beats, TAKEOVER)
    ordered = sorted(beats, key=lambda b: b.sent_at)
    goodbye = next((i for i, b in enumerate(ordered) if b.instance_id == "a" and b.leaving), len(ordered))
    refused = {id(r.beat) for r in settled.refused}
    for b in ordered[: goodbye + 1]:
        assert (id(b) in refused) == (b.instance_id != "a")  # until its goodbye, only the holder counts
    if goodbye == len(ordered):
        assert settled.holders.get("hv1", Holder("a")).instance_id == "a"


@given(beats=beats_of_one_host, holder=instances, silent_for=st.floats(0, 1000))
def test_every_beat_is_folded_or_refused_and_the_folded_one_is_the_newest_accepted(
    beats: list[AgentHeartbeat], holder: str | None, silent_for: float
) -> None:
    settled = settle({"hv1": Holder(holder, silent_for)}, beats, TAKEOVER)
    refused = {id(r.beat) for r in settled.refused}
    accepted = [b for b in beats if id(b) not in refused]
    if accepted:
        newest = max(b.sent_at for b in accepted)
        assert settled.accepted["hv1"].sent_at == newest
        last = settled.accepted["hv1"]
        assert settled.holders["hv1"].instance_id == (None if last.leaving else last.instance_id)
    else:
        assert settled.accepted == {}
    assert len(settled.refused) + len(accepted) == len(beats)


def test_a_conflict_is_announced_once_a_minute_per_host_and_instance() -> None:
    now = [0.0]
    notices = ConflictNotices(lambda: now[0], repeat_after=60.0)
    assert notices.due("hv1", "b")
    assert not notices.due("hv1", "b")
    assert notices.due("hv1", "c")  # another duplicate is news
    assert notices.due("hv2", "b")
    now[0] = 59.9
    assert not notices.due("hv1", "b")
    now[0] = 60.0
    assert notices.due("hv1", "b")
