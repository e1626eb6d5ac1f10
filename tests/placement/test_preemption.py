"""Preemption's choice of victims: examples, then properties against brute force."""

from __future__ import annotations

import random
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.support import NOW, TIMEOUT, host, request
from vmsched_placement import DecisionContext, Demand, Fleet, HostState, Weights
from vmsched_placement.preemption import Resident, cheapest, fits_after, preemptible_rows, victims_on


def vm(vm_id: str, priority: int, cpu: int, memory_mb: int = 0) -> Resident:
    return Resident(vm_id, priority, Demand(cpu, memory_mb, 0))


def full(host_id: str, residents: list[Resident], *, cpu: int = 16, memory_mb: int = 32768) -> HostState:
    return host(
        host_id,
        cpu=cpu,
        memory_mb=memory_mb,
        used_cpu=sum(r.demand.cpu for r in residents),
        used_memory_mb=sum(r.demand.memory_mb for r in residents),
    )


def test_the_lowest_priorities_go_first_even_when_a_higher_one_alone_would_do() -> None:
    residents = [vm("big", 50, 8), vm("a", 10, 4), vm("b", 10, 4)]
    found = victims_on(full("hv", residents), Demand(8, 0, 0), 100, residents)
    assert found is not None
    assert [r.vm_id for r in found.vms] == ["a", "b"]  # two of priority 10, not one of 50
    assert found.cost == (10, 2, 20)


def test_fewest_vms_within_the_lowest_priority_that_makes_room() -> None:
    residents = [vm("s1", 5, 2), vm("s2", 5, 2), vm("s3", 5, 2), vm("large", 5, 6), vm("keep", 500, 4)]
    found = victims_on(full("hv", residents), Demand(6, 0, 0), 100, residents)
    assert found is not None
    assert [r.vm_id for r in found.vms] == ["large"]


def test_nothing_of_equal_or_higher_priority_is_ever_taken() -> None:
    residents = [vm("same", 100, 8), vm("higher", 900, 8)]
    assert victims_on(full("hv", residents), Demand(4, 0, 0), 100, residents) is None


def test_a_vm_that_fits_already_preempts_nothing() -> None:
    residents = [vm("a", 0, 4)]
    assert victims_on(full("hv", residents), Demand(4, 0, 0), 100, residents) is None


def test_every_resource_short_is_covered() -> None:
    residents = [vm("cpu-heavy", 1, 8, 1024), vm("mem-heavy", 1, 1, 30000), vm("both", 2, 7, 30000)]
    hv = full("hv", residents, cpu=16, memory_mb=61440)
    found = victims_on(hv, Demand(8, 30000, 0), 100, residents)
    assert found is not None
    assert fits_after(hv, Demand(8, 30000, 0), found.vms)
    assert [r.vm_id for r in found.vms] == ["cpu-heavy", "mem-heavy"]  # priority 1 suffices


def test_the_cheapest_host_wins_then_the_lowest_id() -> None:
    on_a = [vm("a1", 300, 8), vm("a2", 300, 8)]
    on_b = [vm("b1", 10, 4), vm("b2", 10, 4), vm("b3", 10, 8)]
    on_c = [vm("c1", 10, 8), vm("c2", 10, 8)]
    hosts = [full("hv-a", on_a), full("hv-b", on_b), full("hv-c", on_c)]
    found = cheapest(hosts, Demand(8, 0, 0), 500, {"hv-a": on_a, "hv-b": on_b, "hv-c": on_c})
    assert found is not None
    assert (found.host_id, [r.vm_id for r in found.vms]) == ("hv-b", ["b3"])  # (10, 1, 10); hv-c ties, b < c


def test_only_hosts_passing_every_rule_but_resources_can_be_freed() -> None:
    hosts = [
        host("hv-1", used_cpu=16),
        host("hv-2", used_cpu=16, labels={"zone": "b"}),
        host("hv-3", used_cpu=16, paused=True),
        host("hv-4", used_cpu=16, status="offline"),
    ]
    fleet = Fleet.from_hosts(hosts)
    context = DecisionContext(NOW, TIMEOUT, Weights(), random.Random(0), 0)
    rows = preemptible_rows(fleet, request(cpu=8, labels={"zone": "b"}), context)
    assert [fleet.host_at(row).id for row in rows] == ["hv-2"]


def test_a_host_dedicated_to_another_project_is_never_freed_for_a_vm() -> None:
    fleet = Fleet.from_hosts([host("hv-1", used_cpu=16, dedicated_to="ml"), host("hv-2", used_cpu=16)])
    context = DecisionContext(NOW, TIMEOUT, Weights(), random.Random(0), 0)
    rows = preemptible_rows(fleet, request(cpu=8, project="web"), context)
    assert [fleet.host_at(row).id for row in rows] == ["hv-2"]
    rows = preemptible_rows(fleet, request(cpu=8, project="ml", dedicated=True), context)
    assert [fleet.host_at(row).id for row in rows] == ["hv-1"]


# -- properties -------------------------------------------------------------------------------------

residents_lists = st.lists(
    st.builds(
        Resident,
        st.uuids().map(str),
        st.integers(0, 6).map(lambda n: n * 100),
        st.builds(Demand, st.integers(0, 8), st.integers(0, 4096), st.integers(0, 50), st.integers(0, 1)),
    ),
    max_size=7,
    unique_by=lambda r: r.vm_id,
)
demands = st.builds(Demand, st.integers(0, 16), st.integers(0, 16384), st.integers(0, 200), st.integers(0, 2))


def loaded(residents: list[Resident], capacity: Demand) -> HostState:
    used = Demand(0, 0, 0, 0)
    for r in residents:
        used = used.plus(r.demand)
    return host(
        "hv",
        cpu=capacity.cpu,
        memory_mb=capacity.memory_mb,
        disk_gb=capacity.disk_gb,
        gpu=capacity.gpu,
        used_cpu=used.cpu,
        used_memory_mb=used.memory_mb,
        used_disk_gb=used.disk_gb,
        used_gpu=used.gpu,
    )


@settings(max_examples=300, deadline=None)
@given(residents=residents_lists, demand=demands, priority=st.integers(0, 700))
def test_victims_make_room_are_all_needed_and_of_the_lowest_possible_priority(
    residents: list[Resident], demand: Demand, priority: int
) -> None:
    hv = loaded(residents, Demand(32, 32768, 400, 4))
    found = victims_on(hv, demand, priority, residents)
    lower = [r for r in residents if r.priority < priority]
    if found is None:
        assert fits_after(hv, demand, ()) or not fits_after(hv, demand, lower)
        return
    assert not fits_after(hv, demand, ())
    assert all(r.priority < priority for r in found.vms)
    assert fits_after(hv, demand, found.vms)
    for victim in found.vms:  # none preempted for nothing
        assert not fits_after(hv, demand, [r for r in found.vms if r is not victim])
    ceiling = max(r.priority for r in found.vms)
    assert not fits_after(hv, demand, [r for r in lower if r.priority < ceiling])


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 3).map(lambda n: n * 10), st.integers(1, 8)), max_size=8),
    need=st.integers(1, 16),
)
def test_on_one_resource_the_number_of_victims_is_the_fewest_brute_force_finds(
    sizes: list[tuple[int, int]], need: int
) -> None:
    residents = [vm(f"vm-{n}", priority, cpu) for n, (priority, cpu) in enumerate(sizes)]
    hv = full("hv", residents, cpu=16)
    found = victims_on(hv, Demand(need, 0, 0), 100, residents)
    best: tuple[int, int] | None = None
    for count in range(1, len(residents) + 1):
        for chosen in combinations(residents, count):
            if fits_after(hv, Demand(need, 0, 0), chosen):
                cost = (max(r.priority for r in chosen), count)
                best = cost if best is None or cost < best else best
    if fits_after(hv, Demand(need, 0, 0), ()) or best is None:
        assert found is None
    else:
        assert found is not None
        assert found.cost[:2] == best
