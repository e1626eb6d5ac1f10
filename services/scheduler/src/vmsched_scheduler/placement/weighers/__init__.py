"""The weighers, applied in order before the strategy: each keeps, of the hosts still in the running,
those it penalises least (lexicographic: a later weigher and then the strategy only break its ties).
A weigher never makes a VM unschedulable: it chooses among hosts that passed every filter."""

from __future__ import annotations

from vmsched_scheduler.placement.fleet import BoolArray, FleetColumns
from vmsched_scheduler.placement.model import RequestVector
from vmsched_scheduler.placement.weighers.base import HostWeigher
from vmsched_scheduler.placement.weighers.server_group import ServerGroupWeigher

WEIGHERS: tuple[HostWeigher, ...] = (ServerGroupWeigher(),)


def preferred(columns: FleetColumns, request: RequestVector, eligible: BoolArray, count: int) -> int:
    """Narrow ``eligible`` (in place) to the hosts every weigher prefers, in order; returns how many
    remain (at least one, when ``count`` >= 1)."""
    for weigher in WEIGHERS:
        count = weigher.narrow(columns, request, eligible, count)
    return count


__all__ = ["WEIGHERS", "HostWeigher", "ServerGroupWeigher", "preferred"]
