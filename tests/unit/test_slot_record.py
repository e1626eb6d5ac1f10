"""A VM placed in a reservation's slot records the slot's own decision (its replay makes that one
again), or, for a slot placed before slots kept theirs, the reservation alone."""

from __future__ import annotations

from datetime import UTC, datetime

from vmsched_contract.decision import Candidate, JournalKind, JournalRef, PlacementRecord
from vmsched_contract.strategy import Strategy
from vmsched_scheduler.ledger import slot_record

TAKEN = PlacementRecord(
    strategy=Strategy.LEAST_LOADED,
    host=None,
    considered=0,
    eligible=0,
    decided_at=datetime(2026, 11, 26, 13, 0, tzinfo=UTC),
    decision_us=0.0,
    detail="reservation r-1",
)


def test_the_vm_records_its_slots_decision_with_its_host_and_reservation() -> None:
    slot = PlacementRecord(
        strategy=Strategy.BEST_FIT,
        host="hv-02",
        score=0.25,
        candidates=[Candidate(host="hv-02", score=0.25), Candidate(host="hv-01", score=0.5)],
        considered=2,
        eligible=2,
        decided_at=datetime(2026, 11, 26, 12, 0, tzinfo=UTC),
        decision_us=12.0,
        journal=JournalRef(replica="r", seq=7),
    )
    record = slot_record(TAKEN, "hv-02", slot.model_dump(mode="json"))
    assert (record.host, record.detail, record.strategy) == ("hv-02", "reservation r-1", Strategy.BEST_FIT)
    assert record.candidates == slot.candidates
    assert record.journal == JournalRef(replica="r", seq=7, kind=JournalKind.RESERVATION_SLOT)


def test_a_slot_without_its_decision_gives_the_reservation_alone() -> None:
    record = slot_record(TAKEN, "hv-02", None)
    assert (record.host, record.detail, record.journal) == ("hv-02", "reservation r-1", None)
