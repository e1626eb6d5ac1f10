"""The weigher extension point: a preference among the hosts that pass every filter, never a refusal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vmsched_scheduler.placement.fleet import FleetColumns, FloatArray
    from vmsched_scheduler.placement.model import RequestVector


@runtime_checkable
class HostWeigher(Protocol):
    """A preference. ``NAME`` says which (for people; a weigher rejects nothing, so it is no reason)."""

    NAME: str

    def penalty(self, columns: FleetColumns, request: RequestVector) -> FloatArray | None:
        """Every host's penalty (lower is preferred), or None when this request states no preference."""
        ...
