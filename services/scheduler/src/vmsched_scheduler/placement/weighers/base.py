"""The weigher extension point: a preference among the hosts that pass every filter, never a refusal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vmsched_scheduler.placement.fleet import BoolArray, FleetColumns
    from vmsched_scheduler.placement.model import RequestVector


@runtime_checkable
class HostWeigher(Protocol):
    """A preference. ``NAME`` says which (for people; a weigher rejects nothing, so it is no reason)."""

    NAME: str

    def narrow(self, columns: FleetColumns, request: RequestVector, eligible: BoolArray, count: int) -> int:
        """Keep in ``eligible`` (in place) only the hosts this weigher penalises least among them;
        return how many remain. ``count`` >= 1 is ``eligible.sum()``; a request that states no
        preference leaves ``eligible`` as it is and returns ``count``."""
        ...
