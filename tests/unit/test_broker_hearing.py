"""When the gateway may take a host's silence for the host's: only while it hears the broker (the
heartbeats of any host, or its own probe) and folds the heartbeats it hears, and only for a silence
it listened to for a whole offline timeout."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmsched_gateway import health
from vmsched_gateway.health import FailureGrace, HealthCheck
from vmsched_gateway.hearing import BrokerHearing, FoldProgress
from vmsched_gateway.host_store import SilenceCheck
from vmsched_runtime.settings import Settings

OFFLINE = 15.0


def listen(hearing: BrokerHearing, start: float, end: float) -> None:
    """The gateway's own probe back every second from ``start`` to ``end``."""
    moment = start
    while moment <= end:
        hearing.heard(moment)
        moment += 1.0


def test_a_gateway_that_hears_takes_a_host_silent_for_the_offline_timeout_for_offline() -> None:
    hearing = BrokerHearing.starting(now=100.0, offline_timeout=OFFLINE)
    hearing.heard(100.5)
    assert not hearing.deaf(101.0, connected=True)
    assert hearing.offline_after(101.0) == OFFLINE + 0.5


def test_a_gateway_whose_broker_connection_is_down_is_deaf_at_once() -> None:
    hearing = BrokerHearing.starting(now=100.0, offline_timeout=OFFLINE)
    assert hearing.deaf(100.1, connected=False)
    assert hearing.offline_after(100.1) is None


def test_a_gateway_that_hears_nothing_at_all_for_three_probes_is_deaf() -> None:
    hearing = BrokerHearing.starting(now=100.0, offline_timeout=OFFLINE)
    assert not hearing.deaf(103.0, connected=True)
    assert hearing.deaf(103.1, connected=True)  # connected, yet no heartbeat and not its own probe back
    assert hearing.offline_after(103.1) is None


def test_it_counts_itself_cut_off_within_half_an_offline_timeout() -> None:
    # A host heard just before the cut must not reach the offline timeout before the gateway notices.
    assert BrokerHearing.starting(now=0.0, offline_timeout=4.0).deaf_after == 2.0


def test_the_seconds_the_gateway_itself_heard_nothing_do_not_count_in_a_hosts_silence() -> None:
    """Before it counts itself deaf, the gateway may already be cut: a host heard 13 s before the
    last thing the gateway heard is not offline 2.9 s later, though its heartbeat is 15.9 s old."""
    hearing = BrokerHearing.starting(now=0.0, offline_timeout=OFFLINE)
    listen(hearing, 0.0, 50.0)  # the host's last heartbeat came at 37, the gateway's own probes to 50
    silent_for = 52.9 - 37.0
    assert silent_for > OFFLINE
    limit = hearing.offline_after(52.9)
    assert limit is not None
    assert limit > silent_for
    assert hearing.offline_after(53.5) is None  # and by then it is deaf: nobody is taken for offline


def test_after_a_deaf_spell_no_host_is_offline_for_one_offline_timeout() -> None:
    hearing = BrokerHearing.starting(now=0.0, offline_timeout=OFFLINE)
    listen(hearing, 0.0, 10.0)
    assert hearing.deaf(11.0, connected=False)  # the cut: connection refused
    listen(hearing, 40.0, 54.0)  # healed: the first heartbeats are back, the rest come within an interval
    assert not hearing.deaf(40.5, connected=True)
    assert hearing.offline_after(40.5) is None
    assert hearing.offline_after(54.9) is None
    hearing.heard(55.0)
    assert hearing.offline_after(55.0) == OFFLINE


def test_a_deaf_spell_the_health_check_never_saw_holds_as_well() -> None:
    """The health check may be stuck on the cut itself (a statement to the broker that does not
    answer): the gap in what the gateway heard says it was deaf."""
    hearing = BrokerHearing.starting(now=0.0, offline_timeout=OFFLINE)
    listen(hearing, 0.0, 10.0)
    listen(hearing, 40.0, 55.0)  # nothing in between, and nobody asked whether it was deaf
    assert hearing.offline_after(40.5) is None
    assert hearing.offline_after(54.9) is None
    assert hearing.offline_after(55.0) == OFFLINE


def test_the_time_a_gateway_took_to_start_is_no_deaf_spell() -> None:
    hearing = BrokerHearing.starting(now=0.0, offline_timeout=OFFLINE)
    hearing.begin(8.0)  # it connected and started consuming 8 s after it was built
    hearing.heard(8.2)
    assert hearing.offline_after(8.25) == pytest.approx(OFFLINE + 0.05)


# A run of what the gateway heard: the gaps between messages (some of them a cut), then the moment
# the health check asks, and when the host it asks about was last heard (with one of the messages).
gaps = st.lists(st.floats(0.01, 40.0), min_size=1, max_size=30)


@given(gaps=gaps, host=st.integers(0, 29), after=st.floats(0.0, 5.0))
def test_a_host_is_offline_only_after_a_whole_offline_timeout_the_gateway_heard_through(
    gaps: list[float], host: int, after: float
) -> None:
    hearing = BrokerHearing.starting(now=0.0, offline_timeout=OFFLINE)
    heard = [0.0]
    for gap in gaps:
        heard.append(heard[-1] + gap)
        hearing.heard(heard[-1])
    now = heard[-1] + after
    host_heard = heard[min(host, len(heard) - 1)]
    limit = hearing.offline_after(now)
    if limit is None or now - host_heard <= limit:
        return
    # Taken for offline: the gateway heard something at least every deaf_after seconds through the
    # last offline timeout, and the host was silent through all of it.
    window = [moment for moment in heard if moment >= now - OFFLINE] + [now]
    start = max(moment for moment in heard if moment < now - OFFLINE)
    assert all(b - a <= hearing.deaf_after for a, b in zip([start, *window], window, strict=False))
    assert host_heard < now - OFFLINE


@given(listening=st.floats(OFFLINE, 200.0), silent=st.floats(0.0, 100.0))
def test_a_gateway_that_hears_marks_a_host_silent_past_the_timeout_by_more_than_a_probe(
    listening: float, silent: float
) -> None:
    hearing = BrokerHearing.starting(now=0.0, offline_timeout=OFFLINE)
    moment = 0.0
    while moment < listening:  # its own probe back every second, no deaf spell
        moment += 1.0
        hearing.heard(moment)
    host_heard = moment - OFFLINE - 1.0 - silent  # silent for the timeout, a probe interval and more
    limit = hearing.offline_after(moment + 0.5)
    assert limit is not None
    assert moment + 0.5 - host_heard > limit


# The health check's use of it: fakes of the gateway's stores, the broker's connection as it says.
class FakeHosts:
    def __init__(self) -> None:
        self.silences: list[float] = []

    async def silence(self, offline_after: float) -> SilenceCheck:
        self.silences.append(offline_after)
        return SilenceCheck(offline=[], unknown=0, heard_any=True)

    async def fail_fenced(self, *, exclude_for: float) -> list[object]:
        return []


class FakeSweeps:
    async def restart_due(self, delay: float) -> list[object]:
        return []


def broker(*, up: bool) -> Any:
    connected = asyncio.Event()
    if up:
        connected.set()
    return SimpleNamespace(_connection=SimpleNamespace(is_closed=False, connected=connected))


def health_check(
    hosts: FakeHosts, hearing: BrokerHearing, grace: FailureGrace, *, up: bool, folding: FoldProgress | None = None
) -> HealthCheck:
    nothing = cast("Any", None)
    settings = Settings(agent_offline_timeout=OFFLINE, agent_lost_timeout=60)
    return HealthCheck(
        cast("Any", hosts), cast("Any", FakeSweeps()), nothing, broker(up=up), nothing, settings, grace, nothing,
        nothing, hearing, folding or FoldProgress(),
    )  # fmt: skip


@pytest.fixture
def assignments_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check ends before resending anything: assignments wait in the gateway's queue."""

    async def waiting(broker: object, queue: object) -> int:
        return 1

    monkeypatch.setattr(health, "ready_messages", waiting)


async def test_a_gateway_cut_from_the_broker_marks_no_host_offline_and_fails_nothing() -> None:
    now = time.monotonic()
    hosts = FakeHosts()
    grace = FailureGrace.starting(now - 1000, timeout=60)  # long since allowed to fail
    await health_check(hosts, BrokerHearing.starting(now, OFFLINE), grace, up=False).once()
    assert hosts.silences == []
    assert not grace.allows_failing(now + 59)


async def test_a_gateway_hearing_again_marks_no_host_offline_for_an_offline_timeout(assignments_waiting: None) -> None:
    now = time.monotonic()
    hosts = FakeHosts()
    hearing = BrokerHearing.starting(now - 40, OFFLINE)
    hearing.heard(now)  # the first message after 40 s of nothing
    grace = FailureGrace.starting(now - 1000, timeout=60)
    await health_check(hosts, hearing, grace, up=True).once()
    assert hosts.silences == []
    assert not grace.allows_failing(now + 59)


async def test_a_gateway_that_hears_counts_a_hosts_silence_past_its_own(assignments_waiting: None) -> None:
    now = time.monotonic()
    hosts = FakeHosts()
    hearing = BrokerHearing.starting(now - 100, OFFLINE)
    listen(hearing, now - 100, now - 1.0)  # the last probe back a second ago
    await health_check(hosts, hearing, FailureGrace.starting(now, timeout=60), up=True).once()
    assert len(hosts.silences) == 1
    assert OFFLINE + 1.0 <= hosts.silences[0] < OFFLINE + 1.5


async def test_a_gateway_whose_heartbeats_wait_to_be_folded_marks_no_host_offline_and_fails_nothing(
    assignments_waiting: None,
) -> None:
    now = time.monotonic()
    hosts = FakeHosts()
    hearing = BrokerHearing.starting(now - 100, OFFLINE)
    listen(hearing, now - 100, now - 1.0)  # it hears the broker well
    folding = FoldProgress()
    folding.folded(now - 100)
    folding.submitted(now - 4.0)  # heartbeats have waited 4 s, and nothing was folded since (Redis silent)
    grace = FailureGrace.starting(now - 1000, timeout=60)

    await health_check(hosts, hearing, grace, up=True, folding=folding).once()

    assert hosts.silences == []
    assert not grace.allows_failing(now + 59)
    # Folded again: hosts may be taken for offline once the fleet had an offline timeout to be folded.
    folding.folded(now + 1)
    folding.answered()
    assert hearing.offline_after(now + 2) is None
    listen(hearing, now, now + OFFLINE + 1)
    assert hearing.offline_after(now + OFFLINE + 1) is not None


def test_heartbeats_folded_steadily_are_not_behind() -> None:
    folding = FoldProgress()
    for moment in range(100):  # a heartbeat a second for each of 50 hosts, folded in batches every second
        for _ in range(50):
            folding.submitted(float(moment))
        assert not folding.behind(moment + 0.9, by=3.0)
        folding.folded(moment + 0.9)
        for _ in range(50):
            folding.answered()
    assert folding.waiting == 0
    assert not folding.behind(1000.0, by=3.0)  # nothing waits: nothing is behind


def test_heartbeats_that_wait_longer_than_the_limit_are_behind() -> None:
    folding = FoldProgress()
    folding.folded(0.0)
    folding.submitted(10.0)
    assert not folding.behind(12.9, by=3.0)
    assert folding.behind(13.1, by=3.0)
    folding.folded(13.5)
    folding.answered()
    assert not folding.behind(20.0, by=3.0)


def test_a_failed_fold_holds_only_for_a_while_and_a_fleet_silent_after_it_is_taken_for_silent() -> None:
    folding = FoldProgress()
    folding.submitted(10.0)
    folding.failed(11.0)  # its heartbeats were not written (and are not delivered again)
    folding.answered()
    assert folding.behind(11.5, by=3.0)  # nothing waits, but what came was lost
    assert not folding.behind(14.5, by=3.0)  # no fold since, none failing: the fleet went silent
    hearing = BrokerHearing.starting(0.0, OFFLINE)
    listen(hearing, 0.0, 40.0)
    hearing.blind(11.5)  # what the health check did while the fold was failing
    assert hearing.offline_after(11.5 + OFFLINE - 0.1) is None
    assert hearing.offline_after(11.5 + OFFLINE + 0.1) is not None  # silent hosts are offline again
