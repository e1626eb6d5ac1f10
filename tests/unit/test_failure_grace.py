"""When the gateway may fail the VMs of silent hosts: not while it has not been listening a whole timeout."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from vmsched_gateway.health import FailureGrace, HealthCheck
from vmsched_gateway.hearing import BrokerHearing

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


async def test_a_check_that_fails_counts_as_a_cut_off() -> None:
    """The gateway cut from PostgreSQL cannot check, nor fold heartbeats: once it can again, every host
    looks silent since the cut began, and a first heartbeat folded would end a cut-off the check never
    noticed (tests/faults/test_partitions.py: gateway-database-refused failed VMs of healthy hosts,
    and later marked every one offline as it healed)."""
    grace = FailureGrace.starting(now=0.0, timeout=TIMEOUT)  # long since allowed to fail
    nothing = cast("Any", None)
    hearing = BrokerHearing.starting(now=time.monotonic(), offline_timeout=5.0)
    check = HealthCheck(nothing, nothing, nothing, nothing, nothing, nothing, grace, nothing, nothing, hearing)
    checked = asyncio.Event()

    async def unreachable() -> None:
        hearing.heard(time.monotonic())  # the broker is heard all along
        checked.set()
        raise ConnectionRefusedError(111, "Connect call failed")

    check.once = unreachable  # type: ignore[method-assign]
    before = time.monotonic()
    duty = asyncio.create_task(check.forever(interval=60))
    await asyncio.wait_for(checked.wait(), 5)
    duty.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await duty
    after = time.monotonic()

    assert not grace.allows_failing(before + TIMEOUT - 0.001)
    # Nor is any host taken for offline before the fleet has had an offline timeout to be folded again.
    moment = after
    while moment < after + 5.0:  # the broker heard every half second meanwhile
        hearing.heard(moment)
        if moment < before + 5.0:
            assert hearing.offline_after(moment) is None
        moment += 0.5
    hearing.heard(after + 5.0)
    assert hearing.offline_after(after + 5.0) is not None
