"""What-if: ``simulate`` decides in order on one copy of the fleet; ``capacity`` counts what
placing copies one by one would place."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.support import context, fleet_of, host, host_states, request
from vmsched_contract.strategy import Strategy
from vmsched_placement import Demand, Fleet, HostState, decide
from vmsched_placement.whatif import capacity, simulate, unplaced_detail


def test_each_simulated_vm_sees_the_earlier_ones_claims() -> None:
    fleet = fleet_of(host("hv-01", cpu=16), host("hv-02", cpu=16))
    vms = [request(cpu=12, name=f"big-{i}", strategy=Strategy.BEST_FIT) for i in range(3)]
    outcomes = simulate(fleet, vms, context())
    assert [o.decision.host_id for o in outcomes] == ["hv-01", "hv-02", None]
    last = outcomes[2].decision
    assert (last.reason, dict(last.rejections)) == ("cpu", {"cpu": 2})
    assert unplaced_detail(last) == "none of 2 hosts fits (cpu: 2)"
    assert [host for host, _ in outcomes[2].examples["cpu"]] == ["hv-01", "hv-02"]
    assert "needs 12" in outcomes[2].examples["cpu"][0][1]


def test_round_robin_vms_take_consecutive_cursors_as_in_a_round() -> None:
    fleet = fleet_of(*(host(f"hv-0{i}") for i in range(1, 4)))
    vms = [request(strategy=Strategy.ROUND_ROBIN) for _ in range(4)]
    placed = [o.decision.host_id for o in simulate(fleet, vms, context(cursor=1))]
    assert placed == ["hv-02", "hv-03", "hv-01", "hv-02"]


def test_no_online_host_is_no_available_agents_without_examples() -> None:
    fleet = fleet_of(host("hv-01", status="offline"))
    (outcome,) = simulate(fleet, [request()], context())
    assert outcome.decision.reason == "no_available_agents"
    assert unplaced_detail(outcome.decision) == "no online host among 1 known"
    (nothing,) = simulate(Fleet.from_hosts([]), [request()], context())
    assert (nothing.decision.reason, nothing.examples) == ("no_available_agents", {})


def test_capacity_counts_whole_copies_in_the_scarcest_resource_and_names_the_refusing_rule() -> None:
    fleet = fleet_of(
        host("hv-01", cpu=16, memory_mb=8192, labels={"zone": "z1"}),
        host("hv-02", cpu=16, used_cpu=15, labels={"zone": "z1"}),
        host("hv-03", paused=True, labels={"zone": "z2"}),
        host("hv-04", cpu=64, memory_mb=65536, disk_gb=1000),
    )
    rooms = capacity(fleet, Demand(2, 2048, 10), context())
    assert [(r.host_id, r.zone, r.fits, r.refused_by) for r in rooms] == [
        ("hv-01", "z1", 4, None),  # memory: 8192 // 2048
        ("hv-02", "z1", 0, "cpu"),
        ("hv-03", "z2", 0, "paused"),
        ("hv-04", None, 32, None),  # cpu: 64 // 2
    ]
    with pytest.raises(ValueError, match="must ask for some"):
        capacity(fleet, Demand(0, 0, 0), context())


shapes = st.builds(
    Demand, st.integers(0, 4), st.sampled_from([0, 512, 1024, 3000]), st.integers(0, 30), st.integers(0, 1)
)


@settings(max_examples=150, deadline=None)
@given(hosts=st.lists(host_states(), max_size=6), shape=shapes, strategy=st.sampled_from(list(Strategy)))
def test_capacity_equals_placing_copies_one_by_one_until_none_fits(
    hosts: list[HostState], shape: Demand, strategy: Strategy
) -> None:
    if not any(shape.as_tuple()):
        shape = replace(shape, cpu=1)
    fleet = Fleet.from_hosts(hosts)
    rooms = {room.host_id: room.fits for room in capacity(fleet, shape, context())}
    copy = Fleet.from_hosts(fleet)
    placed: dict[str, int] = {}
    vm = replace(request(strategy=strategy), demand=shape, labels={})
    for _ in range(sum(rooms.values()) + 1):
        decision = decide(copy, vm, context())
        if decision.host_id is None:
            break
        copy.allocate(decision.host_id, shape)
        placed[decision.host_id] = placed.get(decision.host_id, 0) + 1
    assert placed == {host_id: fits for host_id, fits in rooms.items() if fits}
