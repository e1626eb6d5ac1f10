"""Applying a plan, the rules alone: moves in order, at most max_parallel in flight, a move the fleet
has made invalid skipped with the reason, each started one ending moved or skipped."""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

from vmsched_contract.messages import Resources
from vmsched_contract.rebalance import MoveState, PlanState
from vmsched_contract.status import Task, VmStatus
from vmsched_domain.rebalance_steps import MoveProgress, PlannedMove, step
from vmsched_domain.records import VmRecord


def vm(number: int, on: str, status: VmStatus = VmStatus.RUNNING, **changes: object) -> VmRecord:
    record = VmRecord(
        id=UUID(int=number),
        name=f"vm-{number}",
        status=status,
        status_reason=None,
        hypervisor_id=on,
        resources=Resources(cpu=1, memory_mb=1024, disk_gb=0),
        labels={},
        strategy=None,
        restart_policy="never",  # type: ignore[arg-type]
        restart_count=0,
        attempt=1,
        failures=0,
        exclusions={},
        attempts=[],
        placement=None,
        created_at=None,
        scheduled_at=None,
        started_at=None,
        failed_at=None,
    )
    return replace(record, **changes)  # type: ignore[arg-type]


MOVES = [PlannedMove(str(UUID(int=n)), "hv-1", "hv-2") for n in range(1, 4)]


def test_moves_start_in_order_up_to_max_parallel() -> None:
    vms = {str(UUID(int=n)): vm(n, "hv-1") for n in range(1, 4)}
    first = step(MOVES, {}, vms, 2)
    assert first.start == MOVES[:2]
    assert first.state is PlanState.APPLYING
    assert first.progress[MOVES[2].vm_id].state is MoveState.QUEUED


def test_a_move_in_flight_holds_its_slot_then_ends_moved_and_frees_it() -> None:
    progress = {MOVES[0].vm_id: MoveProgress(MoveState.IN_FLIGHT, 1)}
    migrating = {
        MOVES[0].vm_id: vm(1, "hv-1", VmStatus.MIGRATING, migrations=1, migration_target="hv-2"),
        MOVES[1].vm_id: vm(2, "hv-1"),
        MOVES[2].vm_id: vm(3, "hv-1"),
    }
    assert step(MOVES, progress, migrating, 1).start == []
    arrived = dict(migrating) | {MOVES[0].vm_id: vm(1, "hv-2", migrations=1)}
    after = step(MOVES, progress, arrived, 1)
    assert after.progress[MOVES[0].vm_id].state is MoveState.MOVED
    assert after.start == [MOVES[1]]


def test_a_rolled_back_migration_is_skipped_with_its_reason() -> None:
    progress = {MOVES[0].vm_id: MoveProgress(MoveState.IN_FLIGHT, 1)}
    back = {MOVES[0].vm_id: vm(1, "hv-1", migrations=1, status_reason="paused: hv-2 is paused")}
    outcome = step(MOVES[:1], progress, back, 1)
    assert outcome.progress[MOVES[0].vm_id] == MoveProgress(MoveState.SKIPPED, 1, "paused: hv-2 is paused")
    assert outcome.state is PlanState.DONE


def test_a_vm_moved_stopped_busy_or_gone_since_the_plan_is_skipped_not_started() -> None:
    vms = {
        MOVES[0].vm_id: vm(1, "hv-3"),
        MOVES[1].vm_id: vm(2, "hv-1", VmStatus.STOPPED),
        MOVES[2].vm_id: vm(3, "hv-1", task=Task.STOPPING),
    }
    outcome = step([*MOVES, PlannedMove(str(UUID(int=9)), "hv-1", "hv-2")], {}, vms, 10)
    assert outcome.start == []
    reasons = [p.reason for p in outcome.progress.values()]
    assert all(p.state is MoveState.SKIPPED for p in outcome.progress.values())
    assert reasons[0] == "the VM is on hv-3 now, not hv-1"
    assert "stopped" in str(reasons[1])
    assert "task" in str(reasons[2])
    assert reasons[3] == "the VM is gone"
    assert outcome.state is PlanState.DONE
