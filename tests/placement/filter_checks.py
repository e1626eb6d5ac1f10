"""Run one filter over a tiny fleet: did each host pass, and what does it say about the ones that fail."""

from __future__ import annotations

from tests.placement.support import context, fleet_of
from vmsched_placement import DecisionContext, HostFilter, HostState, PlacementRequest, RequestVector


def passes(host_filter: HostFilter, host: HostState, req: PlacementRequest, ctx: DecisionContext | None = None) -> bool:
    fleet = fleet_of(host)
    mask = host_filter.mask(fleet.columns, RequestVector.of(req, ctx or context()))
    return mask is None or bool(mask[0])


def reason(host_filter: HostFilter, host: HostState, req: PlacementRequest, ctx: DecisionContext | None = None) -> str:
    fleet = fleet_of(host)
    return host_filter.reason(fleet, 0, RequestVector.of(req, ctx or context()))
