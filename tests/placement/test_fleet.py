from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.placement.support import host
from vmsched_placement import Demand, Fleet
from vmsched_placement import fleet as fleet_module


def test_a_fleet_keeps_hosts_sorted_by_id_and_the_last_state_of_a_repeated_id() -> None:
    fleet = Fleet.from_hosts([host("hv-3"), host("hv-1"), host("hv-2"), host("hv-1", cpu=8)])
    assert fleet.host_ids == ("hv-1", "hv-2", "hv-3")
    assert len(fleet) == 3
    first = fleet.host("hv-1")
    assert first is not None
    assert first.capacity.cpu == 8
    assert fleet.host("hv-9") is None


def test_upsert_adds_new_hosts_in_id_order_and_replaces_known_ones() -> None:
    fleet = Fleet.from_hosts([host("hv-1"), host("hv-3")])
    fleet.upsert(host("hv-2", cpu=4))
    fleet.upsert(host("hv-3", used_cpu=5))
    assert fleet.host_ids == ("hv-1", "hv-2", "hv-3")
    assert fleet.columns.free[0].tolist() == [16, 4, 11]


def test_upsert_many_inserts_a_batch_and_rebuilds_when_the_batch_is_large() -> None:
    fleet = Fleet.from_hosts([host(f"hv-{n:02d}") for n in range(0, 40, 2)])
    fleet.upsert_many([host("hv-05"), host("hv-01"), host("hv-02", cpu=2)])
    fleet.upsert_many([host(f"hv-{n:02d}") for n in range(41, 80)])
    assert fleet.host_ids == tuple(sorted({f"hv-{n:02d}" for n in (*range(0, 40, 2), 1, 5, *range(41, 80))}))
    assert fleet.columns.effective.shape == (4, len(fleet))


def test_remove_forgets_a_host_and_ignores_unknown_ids() -> None:
    fleet = Fleet.from_hosts([host("hv-1"), host("hv-2")])
    fleet.remove("hv-1")
    fleet.remove("hv-9")
    assert fleet.host_ids == ("hv-2",)
    assert "hv-1" not in fleet
    assert fleet.columns.online.shape == (1,)


def test_allocate_and_release_book_a_vm_on_the_host() -> None:
    fleet = Fleet.from_hosts([host("hv-1", used_cpu=2, vm_count=1)])
    fleet.allocate("hv-1", Demand(4, 8192, 50, 0))
    booked = fleet.host("hv-1")
    assert booked is not None
    assert (booked.allocated, booked.vm_count) == (Demand(6, 8192, 50, 0), 2)
    assert fleet.columns.free[:, 0].tolist() == [10, 32768 - 8192, 450, 0]
    fleet.release("hv-1", Demand(4, 8192, 50, 0))
    fleet.release("hv-1", Demand(4, 8192, 50, 0))  # released twice: floored at zero
    released = fleet.host("hv-1")
    assert released is not None
    assert (released.allocated, released.vm_count) == (Demand(0, 0, 0, 0), 0)


def test_allocate_on_an_unknown_host_changes_nothing() -> None:
    fleet = Fleet.from_hosts([host("hv-1")])
    fleet.allocate("hv-2", Demand(1, 1, 1))
    assert list(fleet) == [host("hv-1")]


def test_cached_label_masks_follow_updates() -> None:
    fleet = Fleet.from_hosts([host("hv-1", labels={"zone": "a"}), host("hv-3")])
    assert fleet.columns.label_mask("zone", "a").tolist() == [True, False]
    fleet.upsert(host("hv-2", labels={"zone": "a"}))
    fleet.upsert(replace(host("hv-3"), labels={"zone": "a"}))
    fleet.upsert(host("hv-1", labels={"zone": "b"}))
    assert fleet.columns.label_mask("zone", "a").tolist() == [False, True, True]
    fleet.remove("hv-2")
    assert fleet.columns.label_mask("zone", "a").tolist() == [False, True]
    assert np.array_equal(fleet.columns.label_mask("zone", "b"), [True, False])


def test_label_questions_beyond_the_indexed_key_limit_still_answer_correctly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_module, "MAX_INDEXED_LABEL_KEYS", 2)
    fleet = Fleet.from_hosts([host("hv-1", labels={"a": "1", "b": "1", "c": "1"}), host("hv-2", labels={"c": "2"})])
    for key in ("a", "b", "c", "a"):
        assert fleet.columns.label_mask(key, "1").tolist() == [True, False]
    assert len(fleet.columns.label_codes) == 2
    fleet.upsert(host("hv-2", labels={"a": "1"}))
    assert fleet.columns.label_mask("a", "1").tolist() == [True, True]
    assert fleet.columns.label_mask("a", "never-seen").tolist() == [False, False]
