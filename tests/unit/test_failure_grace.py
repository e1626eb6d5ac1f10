"""When the gateway may fail the VMs of silent hosts: not while it has not been listening a whole timeout."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vmsched_gateway.health import FailureGrace

TIMEOUT = 15.0


def test_a_fresh_gateway_waits_one_timeout_before_failing_anything() -> None:
    grace = FailureGrace.starting(now=100.0, timeout=TIMEOUT)
    assert not grace.allows_failing(100.0)
    assert not grace.allows_failing(114.9)
    assert grace.allows_failing(115.0)


def test_a_cut_off_restarts_the_wait_from_its_last_sighting() -> None:
    grace = FailureGrace.starting(now=0.0, timeout=TIMEOUT)
    grace.cut_off(50.0)  # no agent heard from at all
    grace.cut_off(58.0)  # still nobody: the broker is still down
    assert not grace.allows_failing(60.0)  # the first agents are back; the others get a whole timeout
    assert not grace.allows_failing(72.9)
    assert grace.allows_failing(73.0)


@given(start=st.floats(0, 1e6), spells=st.lists(st.floats(0, 1e3), max_size=10))
def test_failing_is_allowed_exactly_a_timeout_after_the_last_blind_moment(start: float, spells: list[float]) -> None:
    grace = FailureGrace.starting(now=start, timeout=TIMEOUT)
    last = start
    for step in spells:
        last += step
        grace.cut_off(last)
    assert not grace.allows_failing(last + TIMEOUT - 0.001)
    assert grace.allows_failing(last + TIMEOUT)
