"""Rebalancing plans in PostgreSQL (``rebalance_plans``): recording a computed plan, reading one, and
what a plan is computed from besides the snapshot: the running VMs of the hosts and their groups' rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_common.db.records import SERVER_GROUP_COLUMNS, VM_COLUMNS, ServerGroupRecord, VmRecord
from vmsched_common.groups import GroupRule
from vmsched_common.lifecycle import VmStatus

PLANNED = "planned"

_COLUMNS = (
    "id, goal, max_moves, host_selector, moves, score_before, score_after, state, max_parallel, progress,"
    " created_at, applied_at, ended_at"
)
_INSERT = text(
    f"""
    INSERT INTO rebalance_plans (id, goal, max_moves, host_selector, moves, score_before, score_after, state)
    VALUES (:id, :goal, :max_moves, CAST(:host_selector AS jsonb), CAST(:moves AS jsonb), :score_before,
            :score_after, :state)
    RETURNING {_COLUMNS}
    """
)
_GET = text(f"SELECT {_COLUMNS} FROM rebalance_plans WHERE id = :id")
# Only a running VM moves (a migrating one is moving already; any other is not running on a host).
_RUNNING = text(f"SELECT {VM_COLUMNS} FROM vms WHERE status = :status AND hypervisor_id IS NOT NULL ORDER BY id")
_RULES = text(f"SELECT {SERVER_GROUP_COLUMNS} FROM server_groups WHERE id = ANY(CAST(:ids AS uuid[]))")


@dataclass(frozen=True, slots=True)
class StoredMove:
    vm_id: str
    source: str
    target: str
    gain: float


@dataclass(frozen=True, slots=True)
class StoredPlan:
    id: UUID
    goal: str
    max_moves: int
    host_selector: list[dict[str, Any]]
    moves: list[StoredMove]
    score_before: float
    score_after: float
    state: str
    max_parallel: int | None
    progress: dict[str, dict[str, Any]]
    created_at: datetime
    applied_at: datetime | None
    ended_at: datetime | None


def _plan_of(row: Any) -> StoredPlan:
    return StoredPlan(
        id=row.id,
        goal=row.goal,
        max_moves=row.max_moves,
        host_selector=list(row.host_selector or []),
        moves=[StoredMove(m["vm_id"], m["from"], m["to"], float(m["gain"])) for m in row.moves or []],
        score_before=row.score_before,
        score_after=row.score_after,
        state=row.state,
        max_parallel=row.max_parallel,
        progress=dict(row.progress or {}),
        created_at=row.created_at,
        applied_at=row.applied_at,
        ended_at=row.ended_at,
    )


class RebalanceStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def running_vms(self) -> list[VmRecord]:
        """Every running VM (on its host): those a plan may move, and whose groups it must keep."""
        async with self.engine.connect() as connection:
            rows = await connection.execute(_RUNNING, {"status": VmStatus.RUNNING.value})
            return [VmRecord.from_row(row) for row in rows]

    async def group_rules(self, group_ids: list[UUID]) -> dict[UUID, GroupRule]:
        if not group_ids:
            return {}
        async with self.engine.connect() as connection:
            rows = await connection.execute(_RULES, {"ids": group_ids})
            return {row.id: ServerGroupRecord.from_row(row).rule for row in rows}

    async def create(
        self,
        *,
        goal: str,
        max_moves: int,
        host_selector: list[dict[str, Any]],
        moves: list[StoredMove],
        score_before: float,
        score_after: float,
    ) -> StoredPlan:
        params = {
            "id": uuid4(),
            "goal": goal,
            "max_moves": max_moves,
            "host_selector": json.dumps(host_selector),
            "moves": json.dumps([{"vm_id": m.vm_id, "from": m.source, "to": m.target, "gain": m.gain} for m in moves]),
            "score_before": score_before,
            "score_after": score_after,
            "state": PLANNED,
        }
        async with self.engine.begin() as connection:
            return _plan_of((await connection.execute(_INSERT, params)).one())

    async def get(self, plan_id: UUID) -> StoredPlan | None:
        async with self.engine.connect() as connection:
            row = (await connection.execute(_GET, {"id": plan_id})).first()
            return None if row is None else _plan_of(row)
