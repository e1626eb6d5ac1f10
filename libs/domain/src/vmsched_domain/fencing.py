"""What to do about a host lost past AGENT_LOST_TIMEOUT (docs/operations.md#fencing), as a pure
decision: the gateway asks :func:`decide` for each lost host, then acts (runs the fence command,
fails the VMs, announces ``host.fence_needed``) or does nothing.

The rule the decision keeps (vSphere HA's isolation response, Nova's ``forced_down`` before an
evacuate, Pacemaker's STONITH): a lost host's VMs are restarted elsewhere only once the host is known
to be down (fenced by an operator or by the fence command) or the operator allowed restarting
unfenced hosts' VMs (VMSCHED_RESTART_UNFENCED, with no fence command set). Otherwise two copies of a
VM could write one shared disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class LostHostAction(StrEnum):
    FAIL_VMS = "fail_vms"  # its VMs fail and their restart policy applies
    RUN_FENCE = "run_fence"  # run VMSCHED_FENCE_COMMAND (again); its VMs fail only once it succeeded
    ANNOUNCE_FENCE_NEEDED = "announce_fence_needed"  # host.fence_needed; its VMs stay unknown
    HOLD = "hold"  # nothing more to do: its VMs stay unknown until an operator fences it or it is back


@dataclass(frozen=True, slots=True)
class FencePolicy:
    """The operator's settings: whether a fence command is set, and VMSCHED_RESTART_UNFENCED."""

    has_command: bool
    restart_unfenced: bool


@dataclass(frozen=True, slots=True)
class LostHost:
    """A host silent past AGENT_LOST_TIMEOUT, as PostgreSQL has it."""

    host_id: str
    labels: dict[str, str]
    fenced: bool  # fenced already (by an operator, or the command)
    tried: bool  # the gateway already ran the command or announced fence_needed in this silence
    retry_due: bool = False  # the command failed (or its gateway died) and its next try is due


def decide(policy: FencePolicy, host: LostHost) -> LostHostAction:
    """What the gateway does about ``host`` now. The command runs when the host is lost and again,
    after each failure, once :func:`retry_delay` has passed (``retry_due``), until it succeeds or the
    host is back; fence_needed is announced once per silence. ``tried`` stays set until the host
    heartbeats again or is unfenced."""
    if host.fenced:
        return LostHostAction.FAIL_VMS
    if policy.has_command:
        return LostHostAction.RUN_FENCE if not host.tried or host.retry_due else LostHostAction.HOLD
    if policy.restart_unfenced:
        return LostHostAction.FAIL_VMS
    return LostHostAction.HOLD if host.tried else LostHostAction.ANNOUNCE_FENCE_NEEDED


def retry_delay(attempt: int, *, first: float, most: float) -> float:
    """How long after its ``attempt``-th failure (1 for the first) the fence command runs again:
    ``first``, doubled after each failure, never more than ``most`` (VMSCHED_FENCE_RETRY_DELAY and
    VMSCHED_FENCE_RETRY_MAX_DELAY). A BMC that is down for an hour is asked a few dozen times, not
    thousands."""
    if attempt < 1:
        raise ValueError(f"attempts count from 1, got {attempt}")
    return min(most, first * 2.0 ** min(attempt - 1, 64))


def restarts_vms(policy: FencePolicy, *, fenced: bool) -> bool:
    """Whether a lost host's VMs may be failed (and restarted elsewhere): the invariant of
    :func:`decide`, stated once for the tests and the docs."""
    return fenced or (not policy.has_command and policy.restart_unfenced)
