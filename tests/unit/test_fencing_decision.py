"""What the gateway does about a lost host: its VMs restart elsewhere only once it is fenced, or when
the operator allows restarting unfenced hosts' VMs and set no fence command; a failed fence command
runs again after a growing delay (pure: no servers)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmsched_domain.fencing import FencePolicy, LostHost, LostHostAction, decide, restarts_vms, retry_delay

WITH_COMMAND = FencePolicy(has_command=True, restart_unfenced=True)
NO_COMMAND = FencePolicy(has_command=False, restart_unfenced=True)
NO_COMMAND_KEEP = FencePolicy(has_command=False, restart_unfenced=False)


def host(*, fenced: bool = False, tried: bool = False, retry_due: bool = False) -> LostHost:
    return LostHost("hv-1", {"rack": "r1"}, fenced=fenced, tried=tried, retry_due=retry_due)


def test_with_a_fence_command_a_lost_host_is_fenced_first_and_tried_again_only_when_a_retry_is_due() -> None:
    assert decide(WITH_COMMAND, host()) is LostHostAction.RUN_FENCE
    assert decide(WITH_COMMAND, host(tried=True)) is LostHostAction.HOLD  # it failed: the VMs stay unknown
    assert decide(WITH_COMMAND, host(tried=True, retry_due=True)) is LostHostAction.RUN_FENCE  # ...and runs again
    assert decide(WITH_COMMAND, host(fenced=True, tried=True)) is LostHostAction.FAIL_VMS


def test_a_failed_fence_command_waits_twice_as_long_after_each_failure_up_to_the_most() -> None:
    delays = [retry_delay(attempt, first=30, most=600) for attempt in range(1, 8)]
    assert delays == [30, 60, 120, 240, 480, 600, 600]
    assert retry_delay(10_000, first=30, most=600) == 600  # no overflow however long the BMC is down
    with pytest.raises(ValueError, match="attempts count from 1"):
        retry_delay(0, first=30, most=600)


def test_without_a_fence_command_restart_unfenced_keeps_the_old_behaviour() -> None:
    assert decide(NO_COMMAND, host()) is LostHostAction.FAIL_VMS


def test_without_a_fence_command_and_restart_unfenced_false_the_operator_is_told_once() -> None:
    assert decide(NO_COMMAND_KEEP, host()) is LostHostAction.ANNOUNCE_FENCE_NEEDED
    assert decide(NO_COMMAND_KEEP, host(tried=True)) is LostHostAction.HOLD
    assert decide(NO_COMMAND_KEEP, host(tried=True, retry_due=True)) is LostHostAction.HOLD  # once per silence
    assert decide(NO_COMMAND_KEEP, host(fenced=True)) is LostHostAction.FAIL_VMS  # the operator fenced it


@given(
    has_command=st.booleans(),
    restart_unfenced=st.booleans(),
    fenced=st.booleans(),
    tried=st.booleans(),
    retry_due=st.booleans(),
)
def test_vms_are_failed_exactly_when_the_host_is_fenced_or_restarting_unfenced_is_allowed(
    has_command: bool, restart_unfenced: bool, fenced: bool, tried: bool, retry_due: bool
) -> None:
    policy = FencePolicy(has_command=has_command, restart_unfenced=restart_unfenced)
    action = decide(policy, host(fenced=fenced, tried=tried, retry_due=tried and retry_due))
    assert (action is LostHostAction.FAIL_VMS) == restarts_vms(policy, fenced=fenced)
    if has_command and not fenced:  # a command set: the VMs never restart on an unfenced host
        assert action is not LostHostAction.FAIL_VMS
    if tried and not fenced and not (has_command and retry_due):  # nothing again until a retry is due
        assert action in (LostHostAction.HOLD, LostHostAction.FAIL_VMS)
    if action is LostHostAction.ANNOUNCE_FENCE_NEEDED:  # the announcement: once per silence
        assert not tried
