"""``vmsched vms why``: the decision record as a person reads it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from vmsched_client.cli.why import explain
from vmsched_contract.api import Placement, Vm
from vmsched_contract.decision import Candidate, PlacementRecord, RejectedHost
from vmsched_contract.status import VmStatus
from vmsched_contract.strategy import Strategy

AT = datetime(2026, 1, 1, tzinfo=UTC)


def vm(status: VmStatus, host: str | None = None, reason: str | None = None) -> Vm:
    return Vm.model_validate(
        {
            "id": uuid.UUID(int=7),
            "name": "web-1",
            "status": status,
            "hypervisor_id": host,
            "status_reason": reason,
            "cpu": 2,
            "memory_mb": 4096,
            "disk_gb": 10,
            "gpu": 0,
            "labels": {},
            "host_selector": [],
            "strategy": None,
            "restart_policy": "never",
            "restart_count": 0,
            "attempt": 1,
            "attempts": [],
            "created_at": AT,
            "scheduled_at": AT,
            "started_at": None,
            "project": "default",
        }
    )


def test_a_placed_vm_reads_host_and_score_then_rejections_most_first() -> None:
    record = PlacementRecord(
        strategy=Strategy.LEAST_LOADED,
        host="h-2",
        score=0.25,
        candidates=[Candidate(host="h-2", score=0.25), Candidate(host="h-5", score=0.5)],
        considered=10,
        eligible=3,
        rejections={"cpu": 2, "memory": 4, "paused": 1},
        decided_at=AT,
        decision_us=131.4,
    )
    lines = explain(
        vm(VmStatus.RUNNING, "h-2"), Placement(vm_id=uuid.UUID(int=7), status=VmStatus.RUNNING, decision=record)
    )
    assert lines == [
        "VM web-1 (00000000-0000-0000-0000-000000000007): running",
        "placed on h-2 (least_loaded, score 0.25)",
        "next best: h-5 (score 0.5)",
        "considered 10 hosts, 3 eligible; decided 2026-01-01 00:00:00 in 131 µs",
        "rejected 7 hosts, by the first rule each failed:",
        "  memory  4 hosts",
        "  cpu     2 hosts",
        "  paused  1 host",
    ]


def test_an_unschedulable_vm_reads_the_reason_then_examples_with_the_numbers() -> None:
    record = PlacementRecord(
        strategy=Strategy.BEST_FIT,
        host=None,
        considered=2,
        eligible=0,
        rejections={"memory": 2},
        reason="memory",
        detail="no host fits: memory 2",
        examples={"memory": [RejectedHost(host="h-1", reason="memory: needs 4096 MiB, 1024 free")]},
        decided_at=AT,
        decision_us=20,
    )
    placement = Placement(vm_id=uuid.UUID(int=7), status=VmStatus.UNSCHEDULABLE, decision=record)
    lines = explain(vm(VmStatus.UNSCHEDULABLE, reason="memory"), placement)
    assert lines[1:3] == ["no host: memory (best_fit)", "no host fits: memory 2"]
    assert lines[-2:] == ["  memory  2 hosts", "      h-1: memory: needs 4096 MiB, 1024 free"]


def test_an_undecided_vm_says_so() -> None:
    pending = Placement(vm_id=uuid.UUID(int=7), status=VmStatus.PENDING, decision=None)
    assert explain(vm(VmStatus.PENDING), pending)[1] == "no scheduler has decided yet"
