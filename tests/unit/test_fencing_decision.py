"""What the gateway does about a lost host: its VMs restart elsewhere only once it is fenced, or when
the operator allows restarting unfenced hosts' VMs and set no fence command (pure: no servers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vmsched_domain.fencing import FencePolicy, LostHost, LostHostAction, decide, restarts_vms

WITH_COMMAND = FencePolicy(has_command=True, restart_unfenced=True)
NO_COMMAND = FencePolicy(has_command=False, restart_unfenced=True)
NO_COMMAND_KEEP = FencePolicy(has_command=False, restart_unfenced=False)


def host(*, fenced: bool = False, tried: bool = False) -> LostHost:
    return LostHost("hv-1", {"rack": "r1"}, fenced=fenced, tried=tried)


def test_with_a_fence_command_a_lost_host_is_fenced_first_and_once() -> None:
    assert decide(WITH_COMMAND, host()) is LostHostAction.RUN_FENCE
    assert decide(WITH_COMMAND, host(tried=True)) is LostHostAction.HOLD  # it failed: the VMs stay unknown
    assert decide(WITH_COMMAND, host(fenced=True, tried=True)) is LostHostAction.FAIL_VMS


def test_without_a_fence_command_restart_unfenced_keeps_the_old_behaviour() -> None:
    assert decide(NO_COMMAND, host()) is LostHostAction.FAIL_VMS


def test_without_a_fence_command_and_restart_unfenced_false_the_operator_is_told_once() -> None:
    assert decide(NO_COMMAND_KEEP, host()) is LostHostAction.ANNOUNCE_FENCE_NEEDED
    assert decide(NO_COMMAND_KEEP, host(tried=True)) is LostHostAction.HOLD
    assert decide(NO_COMMAND_KEEP, host(fenced=True)) is LostHostAction.FAIL_VMS  # the operator fenced it


@given(has_command=st.booleans(), restart_unfenced=st.booleans(), fenced=st.booleans(), tried=st.booleans())
def test_vms_are_failed_exactly_when_the_host_is_fenced_or_restarting_unfenced_is_allowed(
    has_command: bool, restart_unfenced: bool, fenced: bool, tried: bool
) -> None:
    policy = FencePolicy(has_command=has_command, restart_unfenced=restart_unfenced)
    action = decide(policy, host(fenced=fenced, tried=tried))
    assert (action is LostHostAction.FAIL_VMS) == restarts_vms(policy, fenced=fenced)
    if has_command and not fenced:  # a command set: the VMs never restart on an unfenced host
        assert action is not LostHostAction.FAIL_VMS
    if tried and not fenced:  # the command or the announcement happen once per silence
        assert action in (LostHostAction.HOLD, LostHostAction.FAIL_VMS)
