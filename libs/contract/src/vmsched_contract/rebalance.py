"""The rebalance routes' bodies (docs/operations.md, "Rebalance the fleet"):
``POST /v1/rebalance/plans``, ``GET /v1/rebalance/plans`` (newest first, by pages),
``GET /v1/rebalance/plans/{id}``, ``POST /v1/rebalance/plans/{id}/apply``.
Here, not in the API, so that the client reads them without the services' stack."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from vmsched_contract.messages import HostSelector, HostSelectorTerm

MAX_MOVES = 1000
# A plan holds up to MAX_MOVES moves: a page of plans is kept far shorter than a page of VMs.
PLANS_PER_PAGE = 20
MAX_PLANS_PER_PAGE = 100


class Goal(StrEnum):
    SPREAD = "spread"
    PACK = "pack"


class PlanState(StrEnum):
    PLANNED = "planned"
    APPLYING = "applying"
    DONE = "done"


class MoveState(StrEnum):
    QUEUED = "queued"
    IN_FLIGHT = "in_flight"
    MOVED = "moved"
    SKIPPED = "skipped"


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goal: Goal = Field(description="spread: even out the hosts' weighted utilisation; pack: empty hosts")
    max_moves: Annotated[int, Field(ge=1, le=MAX_MOVES)] = 50
    host_selector: HostSelector = Field(
        default_factory=list, description="only the hosts whose labels satisfy every term take part (empty: all)"
    )


class PlannedMove(BaseModel):
    # "from" on the wire, whoever serialises it (the API, the CLI's -o json).
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    vm_id: str
    source: str = Field(alias="from", description="the host it runs on")
    to: str = Field(description="the host it moves to")
    gain: float = Field(
        description="how much this move improves the score (spread: deviation lowered; pack: hosts emptied)"
    )
    state: MoveState = Field(description="queued, in_flight, moved, or skipped (with the reason)")
    reason: str | None = Field(default=None, description="why it was skipped")


class RebalancePlan(BaseModel):
    id: UUID
    goal: Goal
    state: PlanState = Field(description="planned; applying; done")
    max_moves: int
    host_selector: list[HostSelectorTerm]
    score: str = Field(description="what score_before and score_after measure")
    score_before: float
    score_after: float = Field(description="the score once every move is made")
    moves: list[PlannedMove]
    max_parallel: int | None = Field(description="once applied: the migrations in flight at most")
    progress: dict[MoveState, int] = Field(description="the moves in each state")
    created_at: datetime = Field(description="when it was computed")
    applied_at: datetime | None = Field(default=None, description="when it was applied; null: not yet")
    ended_at: datetime | None = Field(default=None, description="when its last move was made or skipped")


class RebalancePlanPage(BaseModel):
    items: list[RebalancePlan] = Field(description="newest first")
    next_cursor: str | None = Field(description="pass as ?cursor= for the next (older) page; null on the last page")


class ApplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_parallel: Annotated[int, Field(ge=1, le=100, description="migrations in flight at most")] = 4
