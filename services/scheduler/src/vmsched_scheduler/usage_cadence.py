"""How often the scheduler takes a host's new measured usage: at most once per interval per host.

The gateway announces every host again every few seconds (``bump_interval``), and each read of a host
brings the usage its agent measured last. Taken every time, that usage would change on thousands of
hosts a minute, and the decision journal, which writes a host's usage whenever it changed (for the
decisions that read it), would pay for each change (docs/performance.md, "Decision journal"). So a
re-read host keeps the usage this copy holds until that usage is ``interval`` old, counted from when
this copy took it: what a decision reads is at most ``interval`` older than the last heartbeat's.

Pure: the caller hands in the time (a monotonic clock) and the hosts as read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from vmsched_domain.usage import MeasuredUsage
from vmsched_placement.model import HostState


class UsageCadence:
    """The usage held per host, and when it was taken. ``interval`` 0 takes every read's usage."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._held: dict[str, tuple[MeasuredUsage | None, float]] = {}

    def keep(self, host: HostState, now: float) -> HostState:
        """``host`` as read, with the usage held for it unless that is due for renewal at ``now``.

        A host first seen, or whose held usage is none (its agent had not measured yet), takes the
        read's usage at once: there is nothing older to rank it by.
        """
        held = self._held.get(host.id)
        if held is None or held[0] is None or now - held[1] >= self.interval:
            self._held[host.id] = (host.usage, now)
            return host
        usage = held[0]
        return host if host.usage == usage else replace(host, usage=usage)

    def forget(self, host_id: str) -> None:
        """The host left the fleet: if it comes back, its first read's usage is taken."""
        self._held.pop(host_id, None)

    def retain(self, host_ids: Iterable[str]) -> None:
        """Forget every host but these (a full read: the others are gone)."""
        kept = set(host_ids)
        self._held = {host_id: held for host_id, held in self._held.items() if host_id in kept}
