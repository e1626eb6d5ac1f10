"""The filter extension point: one rule that says which hosts may take a VM, and why not."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
    from vmsched_placement.model import RequestVector


@runtime_checkable
class HostFilter(Protocol):
    """A placement rule. ``NAME`` is its key in rejection summaries (``{"memory": 7}``)."""

    NAME: str

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        """Which hosts pass, as a boolean array over the fleet's rows.

        None means this request sets no constraint here: every host passes (and no pass over the
        fleet is spent). The engine never writes into the returned array; a filter may return a
        cached one.
        """
        ...

    # A filter whose rule depends on which hosts pass the others (``spread``) may also define
    # ``mask_among(columns, request, passing)``, ``passing`` being the hosts that pass every filter
    # before it (None: all); ``decide`` then calls it with what it has computed already.

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        """Why the host in row ``index`` fails, with the numbers, as ``"<NAME>: ..."``.

        Only called for hosts whose mask is False; only when a person asks (slow path).
        """
        ...
