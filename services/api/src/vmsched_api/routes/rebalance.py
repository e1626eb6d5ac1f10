"""/v1/rebalance/plans: compute a rebalancing plan on live state and read it back
(vmsched_api.rebalance; the planner is vmsched_placement.rebalance)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, HTTPException, Query, status

from vmsched_api.cursors import decode_cursor, encode_cursor
from vmsched_api.deps import ServicesDep
from vmsched_api.identity.auth import HostsAdmin
from vmsched_api.rebalance import create_plan, to_plan
from vmsched_api.refusals import refusals
from vmsched_api.whatif import SnapshotUnavailable
from vmsched_contract.rebalance import (
    MAX_PLANS_PER_PAGE,
    PLANS_PER_PAGE,
    ApplyRequest,
    PlanRequest,
    RebalancePlan,
    RebalancePlanPage,
)
from vmsched_pg.rebalance_plans import NotPlanned, RebalanceStore
from vmsched_runtime.logs import get_logger

router = APIRouter(prefix="/rebalance", tags=["rebalance"])
log = get_logger("vmsched_api")


@router.post("/plans", status_code=status.HTTP_201_CREATED, response_model=RebalancePlan, responses=refusals(503))
async def plan(body: PlanRequest, services: ServicesDep, _: HostsAdmin) -> RebalancePlan:
    """Compute moves of running VMs, up to ``max_moves``, among the hosts of ``host_selector``:
    ``spread`` lowers the standard deviation of the hosts' weighted utilisation, ``pack`` empties
    hosts (each host whole or not at all). Each move is a migration the placement engine accepts on
    the fleet the moves before it leave (every hard rule, never an overcommit). Nothing moves yet."""
    try:
        stored = await create_plan(services, body)
    except SnapshotUnavailable as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(error)) from None
    log.info("rebalance planned", plan=str(stored.id), goal=stored.goal, moves=len(stored.moves))
    return to_plan(stored)


@router.get("/plans", response_model=RebalancePlanPage)
async def list_plans(
    services: ServicesDep,
    _: HostsAdmin,
    limit: Annotated[int, Query(ge=1, le=MAX_PLANS_PER_PAGE)] = PLANS_PER_PAGE,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> RebalancePlanPage:
    """The plans, newest first, each with where its application stands (as ``GET
    /v1/rebalance/plans/{id}`` answers it); a page at a time (``limit``, then ``cursor``)."""
    try:
        before = None if cursor is None else decode_cursor(cursor)
    except ValueError as error:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["query", "cursor"], "msg": str(error), "type": "value_error"}],
        ) from None
    plans, next_page = await RebalanceStore(services.engine).page(limit=limit, before=before)
    return RebalancePlanPage(
        items=[to_plan(stored) for stored in plans],
        next_cursor=None if next_page is None else encode_cursor(*next_page),
    )


@router.get("/plans/{plan_id}", response_model=RebalancePlan, responses=refusals(404))
async def get_plan(plan_id: UUID, services: ServicesDep, _: HostsAdmin) -> RebalancePlan:
    """A plan as computed, and where its application stands: each move's state (queued, in_flight,
    moved, skipped with the reason) and the count in each."""
    stored = await RebalanceStore(services.engine).get(plan_id)
    if stored is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no rebalance plan {plan_id}")
    return to_plan(stored)


@router.post(
    "/plans/{plan_id}/apply",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RebalancePlan,
    responses=refusals(404, 409),
)
async def apply_plan(
    plan_id: UUID, services: ServicesDep, _: HostsAdmin, body: Annotated[ApplyRequest | None, Body()] = None
) -> RebalancePlan:
    """Carry the plan out by live migrations, in its order, at most ``max_parallel`` at once (the
    gateway starts them, as a drain's). A move the fleet has made invalid since the plan was computed
    (the VM moved, stopped or gone; the target refused by a hard rule on the live snapshot, or full)
    is skipped with the reason; the VM stays where it is, running. 409: applied already."""
    asked = body or ApplyRequest()
    try:
        stored = await RebalanceStore(services.engine).apply(plan_id, asked.max_parallel)
    except NotPlanned as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    if stored is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no rebalance plan {plan_id}")
    log.info("rebalance applying", plan=str(plan_id), max_parallel=asked.max_parallel)
    return to_plan(stored)
