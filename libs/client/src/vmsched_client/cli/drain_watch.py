"""What ``vmsched hosts drain --wait`` says while it follows a drain, and why it stopped following.

On a terminal a progress bar shows it; elsewhere (a log, a CI job, a pipe) a bar shows nothing until
the end, so one line is written for each change instead."""

from __future__ import annotations

from datetime import datetime, timedelta

from vmsched_contract.api import Drain
from vmsched_contract.status import DrainState

# How long past its deadline a drain may still say ``draining`` before the CLI stops following it:
# the gateway ends drains past their deadline on its next sweep, which comes within seconds.
DEADLINE_GRACE = timedelta(seconds=30)


def left(drain: Drain) -> int:
    """The VMs still on the host (migrating away, stuck or queued)."""
    return len(drain.in_flight) + len(drain.stuck) + len(drain.queued)


def progress_line(drain: Drain) -> str:
    """``hv-0002 draining: 1 of 3 moved, 1 in flight, 1 stuck, 0 queued; stuck: <vm>: <reason>``."""
    line = (
        f"{drain.host_id} {drain.state.value}: {len(drain.moved)} of {len(drain.moved) + left(drain)} moved, "
        f"{len(drain.in_flight)} in flight, {len(drain.stuck)} stuck, {len(drain.queued)} queued"
    )
    if drain.stuck:
        line += "; stuck: " + "; ".join(f"{vm.vm_id}: {vm.reason}" for vm in drain.stuck)
    return line


def why_it_stopped(drain: Drain) -> str:
    """The last line of a followed drain: drained, or not, and why."""
    if drain.state is DrainState.DRAINED:
        return (
            f"host {drain.host_id} drained: {len(drain.moved)} VM(s) moved away; "
            f"`vmsched hosts undrain {drain.host_id}` when it may take VMs again"
        )
    if drain.state is DrainState.TIMED_OUT:
        reasons = "".join(f"; {vm.vm_id}: {vm.reason}" for vm in drain.stuck)
        return f"host {drain.host_id} not drained: its deadline passed with {left(drain)} VM(s) left{reasons}"
    return f"host {drain.host_id} still draining past its deadline: is the gateway running? ({progress_line(drain)})"


def overdue(drain: Drain, now: datetime) -> bool:
    """Still ``draining`` well past its deadline: nothing will end it (no gateway sweeps drains)."""
    return drain.state is DrainState.DRAINING and now > drain.deadline_at + DEADLINE_GRACE
