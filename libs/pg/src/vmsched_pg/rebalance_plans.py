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

from vmsched_contract.rebalance import MoveState, PlanState
from vmsched_contract.status import VmStatus
from vmsched_domain.groups import GroupRule
from vmsched_domain.rebalance_steps import MoveProgress, PlannedMove, refused, started, step
from vmsched_domain.records import VmRecord
from vmsched_pg import vm_actions
from vmsched_pg.rows import SERVER_GROUP_COLUMNS, VM_COLUMNS, server_group_from_row, vm_from_row

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
# Newest first; (created_at, id) orders plans made in the same microsecond too.
_NEWEST = text(f"SELECT {_COLUMNS} FROM rebalance_plans ORDER BY created_at DESC, id DESC LIMIT :limit")
_OLDER = text(
    f"SELECT {_COLUMNS} FROM rebalance_plans WHERE (created_at, id) < (:before_created, :before_id)"
    " ORDER BY created_at DESC, id DESC LIMIT :limit"
)
# Only a running VM moves (a migrating one is moving already; any other is not running on a host).
_RUNNING = text(f"SELECT {VM_COLUMNS} FROM vms WHERE status = :status AND hypervisor_id IS NOT NULL ORDER BY id")
_APPLY = text(
    f"""
    UPDATE rebalance_plans SET state = :applying, max_parallel = :max_parallel, applied_at = now()
     WHERE id = :id AND state = :planned
    RETURNING {_COLUMNS}
    """
)
_LOCK_APPLYING = text(
    f"SELECT {_COLUMNS} FROM rebalance_plans WHERE state = :applying ORDER BY created_at LIMIT :limit"
    " FOR UPDATE SKIP LOCKED"
)
_UPDATE = text(
    """
    UPDATE rebalance_plans
       SET progress = CAST(:progress AS jsonb), state = CAST(:state AS text),
           ended_at = CASE WHEN CAST(:state AS text) = 'done' THEN now() ELSE NULL END
     WHERE id = :id
    """
)
_PLAN_VMS = text(f"SELECT {VM_COLUMNS} FROM vms WHERE id = ANY(CAST(:ids AS uuid[]))")
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


PlanPosition = tuple[datetime, UUID]
"""Where a page of plans ends: the last plan's (created_at, id)."""


class NotPlanned(Exception):
    """The plan is being applied or was applied already (a plan is applied once)."""


def _planned(plan: StoredPlan) -> list[PlannedMove]:
    return [PlannedMove(m.vm_id, m.source, m.target) for m in plan.moves]


class RebalanceStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def running_vms(self) -> list[VmRecord]:
        """Every running VM (on its host): those a plan may move, and whose groups it must keep."""
        async with self.engine.connect() as connection:
            rows = await connection.execute(_RUNNING, {"status": VmStatus.RUNNING.value})
            return [vm_from_row(row) for row in rows]

    async def group_rules(self, group_ids: list[UUID]) -> dict[UUID, GroupRule]:
        if not group_ids:
            return {}
        async with self.engine.connect() as connection:
            rows = await connection.execute(_RULES, {"ids": group_ids})
            return {row.id: server_group_from_row(row).rule for row in rows}

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
            "state": PlanState.PLANNED.value,
        }
        async with self.engine.begin() as connection:
            return _plan_of((await connection.execute(_INSERT, params)).one())

    async def get(self, plan_id: UUID) -> StoredPlan | None:
        async with self.engine.connect() as connection:
            row = (await connection.execute(_GET, {"id": plan_id})).first()
            return None if row is None else _plan_of(row)

    async def page(self, *, limit: int, before: PlanPosition | None) -> tuple[list[StoredPlan], PlanPosition | None]:
        """Newest first: up to ``limit`` plans older than ``before`` (from the newest for None); and
        where the next page starts (None on the last)."""
        params: dict[str, Any] = {"limit": limit + 1}
        query = _NEWEST
        if before is not None:
            query = _OLDER
            params["before_created"], params["before_id"] = before
        async with self.engine.connect() as connection:
            plans = [_plan_of(row) for row in await connection.execute(query, params)]
        shown = plans[:limit]
        return shown, ((shown[-1].created_at, shown[-1].id) if len(plans) > limit else None)

    async def apply(self, plan_id: UUID, max_parallel: int) -> StoredPlan | None:
        """Mark the plan for application (the gateway's sweep carries it out). None for an unknown
        plan; raises :class:`NotPlanned` for one applied already."""
        params = {
            "id": plan_id,
            "max_parallel": max_parallel,
            "applying": PlanState.APPLYING.value,
            "planned": PlanState.PLANNED.value,
        }
        async with self.engine.begin() as connection:
            row = (await connection.execute(_APPLY, params)).first()
            if row is not None:
                return _plan_of(row)
            if (await connection.execute(_GET, {"id": plan_id})).first() is None:
                return None
        raise NotPlanned(f"plan {plan_id} is applied already (compute a new plan)")

    async def sweep(self, limit: int = 10) -> list[VmRecord]:
        """One step of every plan being applied (those another replica sweeps now are skipped): the
        migrations its step starts are committed (each in its own transaction, as the API's), its
        progress recorded. Returns the VMs whose ``vm.migrate`` the caller publishes."""
        announce: list[VmRecord] = []
        async with self.engine.begin() as connection:
            rows = await connection.execute(_LOCK_APPLYING, {"applying": PlanState.APPLYING.value, "limit": limit})
            for row in rows.all():
                plan = _plan_of(row)
                planned = _planned(plan)
                ids = [UUID(move.vm_id) for move in planned]
                vms = {str(r.id): vm_from_row(r) for r in await connection.execute(_PLAN_VMS, {"ids": ids})}
                progress = {vm_id: MoveProgress.of(known) for vm_id, known in plan.progress.items()}
                next_step = step(planned, progress, vms, plan.max_parallel or 1)
                now = dict(next_step.progress)
                for move in next_step.start:
                    try:
                        vm = await vm_actions.start_migration(self.engine, UUID(move.vm_id), move.target, budgeted=True)
                    except vm_actions.BudgetSpent:
                        continue  # its server group has no disruption budget left: it stays queued
                    except (vm_actions.Refused, vm_actions.BadTarget) as refusal:
                        now[move.vm_id] = refused(str(refusal))
                        continue
                    if vm is None:
                        now[move.vm_id] = refused("the VM is gone")
                        continue
                    now[move.vm_id] = started(move, vm)
                    announce.append(vm)
                busy = any(known.state in (MoveState.QUEUED, MoveState.IN_FLIGHT) for known in now.values())
                state = PlanState.APPLYING if busy else PlanState.DONE
                params = {
                    "id": plan.id,
                    "progress": json.dumps({vm_id: known.as_json() for vm_id, known in now.items()}),
                    "state": state.value,
                }
                await connection.execute(_UPDATE, params)
        return announce
