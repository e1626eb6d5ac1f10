"""Run one weigher over a tiny fleet: which hosts it would rather not use."""

from __future__ import annotations

from tests.placement.support import context, fleet_of, request
from vmsched_placement import HostState, HostWeigher, RequestVector


def penalised(weigher: HostWeigher, *hosts: HostState, **asked: object) -> list[bool] | None:
    """Per host whether ``weigher`` penalises it for ``request(**asked)``; None: no opinion."""
    fleet = fleet_of(*hosts)
    penalty = weigher.penalty(fleet.columns, RequestVector.of(request(**asked), context()))  # type: ignore[arg-type]
    return None if penalty is None else [bool(p) for p in penalty]
