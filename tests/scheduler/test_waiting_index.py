"""The waiting index by shape, and whom a change of capacity wakes: pure, no servers."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.support import NOW, TIMEOUT, host
from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import (
    HostSelectorTerm,
    Resources,
    SelectorOperator,
    TaintEffect,
    Toleration,
    TolerationOperator,
    VmToPlace,
)
from vmsched_domain.groups import GroupRule
from vmsched_placement import DecisionContext, Fleet, Weights
from vmsched_placement.taint_rules import Taint
from vmsched_scheduler.groups import RoundGroups
from vmsched_scheduler.waiting.index import WaitingEntry, WaitingIndex, room_grew, shape_of, whom_to_wake

CONTEXT = DecisionContext(now=NOW, offline_timeout=TIMEOUT, weights=Weights(), rng=random.Random(0))


def waiting(
    since: float,
    *,
    cpu: int = 4,
    memory_mb: int = 1024,
    labels: dict[str, str] | None = None,
    attempt: int = 1,
    host_selector: list[HostSelectorTerm] | None = None,
    tolerations: list[Toleration] | None = None,
    server_group: uuid.UUID | None = None,
    extra: dict[str, int] | None = None,
) -> WaitingEntry:
    vm_id = uuid.uuid4()
    vm = VmToPlace(
        vm_id=vm_id,
        name=f"vm-{since:g}",
        resources=Resources(cpu=cpu, memory_mb=memory_mb, disk_gb=10, extra=extra or {}),
        labels=labels or {},
        host_selector=host_selector or [],
        tolerations=tolerations or [],
        attempt=attempt,
        server_group=server_group,
    )
    return WaitingEntry(since=since, vm_id=vm_id, attempt=attempt, vm=vm, wait_until=NOW + 600)


def index_of(*entries: WaitingEntry) -> WaitingIndex:
    index = WaitingIndex()
    for entry in entries:
        index.add(entry)
    return index


def test_vms_of_the_same_demand_and_labels_share_a_shape_and_the_oldest_heads_it() -> None:
    young, old, other = waiting(20), waiting(10), waiting(5, cpu=8)
    index = index_of(young, old, other)
    assert index.shapes == 2
    assert index.head(shape_of(young.vm)) == old
    assert shape_of(young.vm) != shape_of(waiting(1, labels={"zone": "a"}).vm)


def test_a_removed_vm_is_skipped_and_an_emptied_shape_goes() -> None:
    first, second = waiting(1), waiting(2)
    index = index_of(first, second)
    index.remove(first.vm_id)
    assert index.head(first.shape) == second
    index.remove(second.vm_id)
    assert index.head(first.shape) is None
    assert index.shapes == 0
    assert len(index) == 0


def test_the_same_vm_at_the_same_attempt_is_indexed_once_and_a_later_attempt_replaces_it() -> None:
    entry = waiting(1)
    index = index_of(entry)
    assert not index.add(entry)
    again = replace(entry, attempt=2, since=1)
    assert index.add(again)
    assert len(index) == 1
    assert index.head(entry.shape) == again


def test_the_cheap_test_keeps_only_shapes_that_fit_some_changed_room() -> None:
    small, big, huge = waiting(1, cpu=2), waiting(2, cpu=8), waiting(3, cpu=64)
    index = index_of(small, big, huge)
    rooms = [host("a", cpu=16, used_cpu=12).free, host("b", cpu=16, used_cpu=7).free]
    assert set(index.shapes_fitting(rooms)) == {small.shape, big.shape}
    assert index.shapes_fitting([]) == []


def test_the_cheap_test_keeps_a_shape_asking_extras_only_for_a_room_with_them_and_the_rest() -> None:
    fpga, two_fpga = waiting(1, cpu=2, extra={"fpga": 1}), waiting(2, cpu=2, extra={"fpga": 2})
    index = index_of(fpga, two_fpga)
    no_fpga = host("a", cpu=16).free
    one_fpga_no_cpu = host("b", cpu=16, used_cpu=15, extra={"fpga": 2}, used_extra={"fpga": 1}).free
    one_fpga = host("c", cpu=16, extra={"fpga": 2}, used_extra={"fpga": 1}).free
    assert index.shapes_fitting([no_fpga, one_fpga_no_cpu]) == []
    assert index.shapes_fitting([no_fpga, one_fpga]) == [fpga.shape]
    assert set(index.shapes_fitting([host("d", cpu=4, extra={"fpga": 3}).free])) == {fpga.shape, two_fpga.shape}


def test_a_vm_asking_extras_waits_with_them_and_is_woken_only_where_they_are_free() -> None:
    entry = waiting(1, cpu=1, extra={"fpga": 1})
    assert shape_of(entry.vm).demand.extra == (("fpga", 1),)
    fleet = Fleet.from_hosts([host("a", cpu=16), host("b", cpu=16, extra={"fpga": 1}, used_extra={"fpga": 1})])
    assert whom_to_wake(index_of(entry), fleet, [entry.shape], CONTEXT) == []
    fleet.upsert(host("b", cpu=16, extra={"fpga": 1}))  # its VM with the fpga went
    assert [(w.entry, w.host_id) for w in whom_to_wake(index_of(entry), fleet, [entry.shape], CONTEXT)] == [
        (entry, "b")
    ]


def test_a_freed_slot_wakes_the_oldest_that_fits_and_only_as_many_as_fit() -> None:
    old, middle, young = waiting(1), waiting(2), waiting(3)
    index = index_of(young, old, middle)
    fleet = Fleet.from_hosts([host("a", cpu=16, used_cpu=8)])  # room for two of 4 vCPUs
    woken = whom_to_wake(index, fleet, [old.shape], CONTEXT)
    assert [w.entry for w in woken] == [old, middle]
    assert [w.host_id for w in woken] == ["a", "a"]
    assert index.head(old.shape) == young  # still waiting
    booked = fleet.host("a")
    assert booked is not None
    assert booked.allocated.cpu == 16


def test_across_shapes_the_oldest_head_goes_first() -> None:
    young_small, old_big = waiting(5, cpu=4), waiting(1, cpu=8)
    index = index_of(young_small, old_big)
    fleet = Fleet.from_hosts([host("a", cpu=16, used_cpu=8)])  # room for the big one, or two small
    woken = whom_to_wake(index, fleet, [young_small.shape, old_big.shape], CONTEXT)
    assert [w.entry for w in woken] == [old_big]
    assert index.head(young_small.shape) == young_small


def test_a_vm_is_woken_only_for_a_host_every_filter_passes() -> None:
    wants_zone = waiting(1, labels={"zone": "z2"})
    index = index_of(wants_zone)
    fleet = Fleet.from_hosts(
        [host("a", labels={"zone": "z1"}), host("b", labels={"zone": "z2"}, paused=True), host("c", status="offline")]
    )
    assert whom_to_wake(index, fleet, [wants_zone.shape], CONTEXT) == []
    fleet.upsert(host("b", labels={"zone": "z2"}))
    assert [w.host_id for w in whom_to_wake(index, fleet, [wants_zone.shape], CONTEXT)] == ["b"]


IN_Z2 = HostSelectorTerm(key="zone", operator=SelectorOperator.IN, values=["z2"])
GPU_TAINT = Taint("gpu", "true", "NoSchedule")
TOLERATES_GPU = Toleration(key="gpu", operator=TolerationOperator.EXISTS, effect=TaintEffect.NO_SCHEDULE)


def test_every_hard_constraint_is_part_of_the_shape() -> None:
    plain = waiting(1)
    group = uuid.uuid4()
    others = [
        waiting(2, host_selector=[IN_Z2]),
        waiting(3, tolerations=[TOLERATES_GPU]),
        waiting(4, server_group=group),
    ]
    assert len({plain.shape, *(entry.shape for entry in others)}) == 4
    assert waiting(5, host_selector=[IN_Z2]).shape == others[0].shape
    assert waiting(6, server_group=group).shape == others[2].shape
    assert [entry.shape.needs_whole_fleet for entry in (plain, *others)] == [False, False, False, True]


def test_a_vm_with_a_host_selector_is_woken_only_for_a_host_it_selects() -> None:
    selective = waiting(1, host_selector=[IN_Z2])
    index = index_of(selective)
    fleet = Fleet.from_hosts([host("a", labels={"zone": "z1"})])
    assert whom_to_wake(index, fleet, [selective.shape], CONTEXT) == []
    fleet.upsert(host("b", labels={"zone": "z2"}))
    assert [w.host_id for w in whom_to_wake(index, fleet, [selective.shape], CONTEXT)] == ["b"]


def test_a_vm_is_woken_for_a_tainted_host_only_if_it_tolerates_the_taint() -> None:
    ordinary, tolerant = waiting(1), waiting(2, tolerations=[TOLERATES_GPU])
    index = index_of(ordinary, tolerant)
    fleet = Fleet.from_hosts([host("gpu-1", taints=[GPU_TAINT])])
    woken = whom_to_wake(index, fleet, [ordinary.shape, tolerant.shape], CONTEXT)
    assert [w.entry for w in woken] == [tolerant]
    assert index.head(ordinary.shape) == ordinary


def test_members_of_an_anti_affinity_group_are_woken_one_per_free_host_and_never_where_a_member_is() -> None:
    rule = GroupRule(id=uuid.uuid4(), policy=GroupPolicy.ANTI_AFFINITY)
    first, second, third = (waiting(float(i), server_group=rule.id) for i in (1, 2, 3))
    index = index_of(first, second, third)
    fleet = Fleet.from_hosts([host("a"), host("b"), host("c")])  # room for all three on any host
    groups = RoundGroups({rule.id: rule}, {rule.id: {"a": 1}})  # a member runs on a already
    woken = whom_to_wake(index, fleet, [first.shape], CONTEXT, groups)
    assert [w.entry for w in woken] == [first, second]
    assert sorted(w.host_id for w in woken) == ["b", "c"]
    assert index.head(first.shape) == third


def test_room_grows_with_a_release_a_new_host_an_unpause_a_bigger_host_or_an_operator_change_not_a_claim() -> None:
    before = host("a", cpu=16, used_cpu=8)
    assert room_grew(None, before)
    assert room_grew(before, replace(before, allocated=replace(before.allocated, cpu=4)))
    assert room_grew(replace(before, scheduling_paused=True), before)
    assert room_grew(replace(before, status="offline"), before)
    assert room_grew(before, replace(before, capacity=replace(before.capacity, cpu=32)))
    assert room_grew(before, replace(before, cpu_ratio=2.0))
    assert room_grew(before, replace(before, labels={"zone": "z2"}))
    assert room_grew(replace(before, taints=(GPU_TAINT,)), before)  # an operator took a taint off
    assert not room_grew(before, before)
    assert not room_grew(before, replace(before, allocated=replace(before.allocated, cpu=12)))
    assert not room_grew(before, replace(before, scheduling_paused=True))


def test_room_grows_when_an_extra_resource_is_freed_or_added_not_when_one_is_claimed() -> None:
    before = host("a", cpu=16, used_cpu=8, extra={"fpga": 2}, used_extra={"fpga": 2})
    freed = replace(before, allocated=replace(before.allocated, extra=(("fpga", 1),)))
    assert room_grew(before, freed)
    assert room_grew(before, replace(before, capacity=replace(before.capacity, extra=(("fpga", 2), ("nic", 1)))))
    assert not room_grew(freed, before)
    assert not room_grew(before, before)


@settings(max_examples=60, deadline=None)
@given(
    cpus=st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=12),
    free_cpu=st.integers(min_value=0, max_value=24),
)
def test_whom_to_wake_matches_a_slow_reference_oldest_first_while_room_lasts(cpus: list[int], free_cpu: int) -> None:
    entries = [waiting(float(i), cpu=cpu) for i, cpu in enumerate(cpus)]
    index = index_of(*entries)
    fleet = Fleet.from_hosts([host("a", cpu=32, used_cpu=32 - free_cpu)])
    woken = [w.entry for w in whom_to_wake(index, fleet, {e.shape for e in entries}, CONTEXT)]
    # Reference: oldest first, across shapes by their oldest still waiting; a shape whose oldest does not
    # fit is done (none of its shape fits either).
    expected, room, blocked = [], free_cpu, set()
    for entry in entries:
        if entry.vm.resources.cpu in blocked:
            continue
        if entry.vm.resources.cpu <= room:
            expected.append(entry)
            room -= entry.vm.resources.cpu
        else:
            blocked.add(entry.vm.resources.cpu)
    assert woken == expected
    assert len(index) == len(entries) - len(expected)
