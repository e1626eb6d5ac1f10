"""``vmsched rebalance apply --wait`` off a terminal: a line for each change of the plan's moves,
none for a poll that changed nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from vmsched_client.cli.app import app
from vmsched_client.cli.command import State
from vmsched_client.cli.rebalance import progress_line
from vmsched_contract.rebalance import Goal, MoveState, PlannedMove, PlanState, RebalancePlan

PLAN_ID = uuid.UUID(int=9)


def plan(state: PlanState, *moves: MoveState) -> RebalancePlan:
    return RebalancePlan(
        id=PLAN_ID,
        goal=Goal.SPREAD,
        state=state,
        max_moves=50,
        host_selector=[],
        score="stddev_weighted_utilisation",
        score_before=0.3,
        score_after=0.1,
        moves=[
            PlannedMove.model_validate(
                {"vm_id": f"vm-{n}", "from": "hv-0001", "to": "hv-0002", "gain": 0.1, "state": s}
            )
            for n, s in enumerate(moves)
        ],
        max_parallel=2,
        progress={},
        created_at=datetime(2026, 11, 27, tzinfo=UTC),
    )


def test_a_progress_line_counts_the_moves_by_state() -> None:
    applying = plan(PlanState.APPLYING, MoveState.MOVED, MoveState.SKIPPED, MoveState.IN_FLIGHT, MoveState.QUEUED)
    assert progress_line(applying) == (
        f"plan {PLAN_ID} applying: 2 of 4 moves ended (moved 1, skipped 1, in flight 1, queued 1)"
    )


class FakeClient:
    def __init__(self, plans: list[RebalancePlan]) -> None:
        self.plans: Iterator[RebalancePlan] = iter(plans)

    def apply_rebalance_plan(self, plan_id: uuid.UUID, max_parallel: int = 4) -> RebalancePlan:
        return next(self.plans)

    def get_rebalance_plan(self, plan_id: uuid.UUID) -> RebalancePlan:
        return next(self.plans)


def test_off_a_terminal_each_change_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    queued, in_flight, moved = MoveState.QUEUED, MoveState.IN_FLIGHT, MoveState.MOVED
    plans = [
        plan(PlanState.APPLYING, queued, queued),
        plan(PlanState.APPLYING, in_flight, queued),
        plan(PlanState.APPLYING, in_flight, queued),
        plan(PlanState.DONE, moved, moved),
    ]
    monkeypatch.setattr(State, "client", lambda self: FakeClient(plans))
    monkeypatch.setattr(time, "sleep", lambda seconds: None)

    result = CliRunner().invoke(app, ["-o", "id", "rebalance", "apply", str(PLAN_ID), "--wait"])

    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"plan {PLAN_ID} applying: 0 of 2 moves ended (moved 0, skipped 0, in flight 0, queued 2)",
        f"plan {PLAN_ID} applying: 0 of 2 moves ended (moved 0, skipped 0, in flight 1, queued 1)",
        f"plan {PLAN_ID} done: 2 of 2 moves ended (moved 2, skipped 0, in flight 0, queued 0)",
    ]
