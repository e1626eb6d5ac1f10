"""Rebalancing plans: each move one the engine accepts on the fleet the earlier moves left, the score
the plan promises the one its moves reach."""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.support import context, fleet_of, host, request
from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_contract.rebalance import Goal
from vmsched_domain.groups import GroupRule, domain_of
from vmsched_placement import Fleet, HostState
from vmsched_placement.model import PlacementGroup
from vmsched_placement.rebalance import MovableVm, Plan, fleet_score, move_refusal, plan_rebalance


def capable(state: HostState) -> HostState:
    return replace(state, can_migrate=True)


def movable(vm_id: str, on: str, *, cpu: int = 2, memory_mb: int = 4096, group: GroupRule | None = None) -> MovableVm:
    return MovableVm(replace(request(cpu=cpu, memory_mb=memory_mb, disk_gb=0, name=vm_id), vm_id=vm_id), on, group)


def fleet_with(hosts: list[HostState], vms: list[MovableVm]) -> Fleet:
    """The hosts with the VMs booked on them (allocations and counts)."""
    fleet = fleet_of(*hosts)
    for one in vms:
        fleet.allocate(one.host_id, one.request.demand)
    return fleet


def replay(hosts: list[HostState], vms: list[MovableVm], plan: Plan, goal: Goal) -> Fleet:
    """Apply the plan move by move on a fresh copy, asserting each move is one the engine accepts
    then (every hard rule, no overcommit)."""
    fleet = fleet_with(hosts, vms)
    by_id = {one.request.vm_id: one for one in vms}
    where = {one.request.vm_id: one.host_id for one in vms}
    ctx = context()
    labels = {h.id: h.labels for h in hosts}
    for move in plan.moves:
        one = by_id[move.vm_id]
        assert where[move.vm_id] == move.source
        others = [by_id[i] for i in where if i != move.vm_id and one.group is not None and by_id[i].group == one.group]
        group = None
        if one.group is not None:
            members: dict[str, int] = {}
            for other in others:
                there = where[other.request.vm_id]
                domain = domain_of(one.group.topology_key, there, labels[there])
                if domain is not None:
                    members[domain] = members.get(domain, 0) + 1
            group = PlacementGroup(one.group, members)
        assert move_refusal(fleet, one, move.source, move.target, ctx, group) is None
        fleet.release(move.source, one.request.demand)
        fleet.allocate(move.target, one.request.demand)
        where[move.vm_id] = move.target
        target = fleet.host(move.target)
        assert target is not None
        assert all(amount >= 0 for amount in target.free.as_tuple()), f"{move.target} overcommitted"
    assert fleet_score(fleet, goal, ctx) == pytest.approx(plan.score_after)
    return fleet


def test_spread_moves_vms_off_the_busiest_host_and_lowers_the_deviation() -> None:
    hosts = [capable(host(f"hv-0{i}", cpu=16, memory_mb=32768)) for i in range(1, 4)]
    vms = [movable(f"vm-{i}", "hv-01") for i in range(6)]
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.SPREAD, context(), max_moves=50)
    assert plan.moves
    assert all(move.source == "hv-01" for move in plan.moves)
    assert plan.score_after < plan.score_before
    assert sum(move.gain for move in plan.moves) == pytest.approx(plan.score_before - plan.score_after)
    assert {move.target for move in plan.moves} == {"hv-02", "hv-03"}
    replay(hosts, vms, plan, Goal.SPREAD)


def test_spread_never_moves_to_or_from_a_host_that_cannot_migrate() -> None:
    hosts = [capable(host("hv-01")), host("hv-02")]
    vms = [movable(f"vm-{i}", "hv-01") for i in range(4)]
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.SPREAD, context(), max_moves=50)
    assert plan.moves == ()
    assert plan.score_after == plan.score_before
    stuck = [host("hv-01"), capable(host("hv-02"))]
    plan = plan_rebalance(fleet_with(stuck, vms), vms, Goal.SPREAD, context(), max_moves=50)
    assert plan.moves == ()


def test_spread_never_moves_a_vm_onto_a_host_dedicated_to_another_project() -> None:
    hosts = [capable(host("hv-01")), capable(host("hv-02", dedicated_to="ml")), capable(host("hv-03"))]
    vms = [movable(f"vm-{i}", "hv-01") for i in range(6)]  # of project "default"
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.SPREAD, context(), max_moves=50)
    assert plan.moves
    assert {move.target for move in plan.moves} == {"hv-03"}
    replay(hosts, vms, plan, Goal.SPREAD)


def test_spread_keeps_anti_affinity() -> None:
    rule = GroupRule(UUID(int=1), GroupPolicy.ANTI_AFFINITY, HOST_TOPOLOGY)
    hosts = [capable(host(f"hv-0{i}")) for i in range(1, 4)]
    vms = [movable("a", "hv-01", group=rule), movable("b", "hv-02", group=rule), movable("c", "hv-01", cpu=8)]
    vms += [movable(f"x-{i}", "hv-01") for i in range(3)]
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.SPREAD, context(), max_moves=50)
    assert all(not (move.vm_id == "a" and move.target == "hv-02") for move in plan.moves)
    replay(hosts, vms, plan, Goal.SPREAD)


def test_pack_empties_the_hosts_with_fewest_vms_onto_the_fullest() -> None:
    hosts = [capable(host(f"hv-0{i}", cpu=16, memory_mb=65536)) for i in range(1, 4)]
    vms = [movable("a", "hv-01"), movable("b", "hv-02"), movable("c", "hv-02")]
    vms += [movable(f"x-{i}", "hv-03") for i in range(4)]
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.PACK, context(), max_moves=50)
    assert (plan.score_before, plan.score_after) == (0, 2)
    assert {move.target for move in plan.moves} == {"hv-03"}
    assert [move.gain for move in plan.moves] == [1, 0, 1]
    replay(hosts, vms, plan, Goal.PACK)


def test_pack_leaves_a_host_whole_when_one_of_its_vms_fits_nowhere() -> None:
    hosts = [capable(host("hv-01", cpu=16)), capable(host("hv-02", cpu=16))]
    vms = [movable("small", "hv-01", cpu=2), movable("big", "hv-01", cpu=10), movable("other", "hv-02", cpu=10)]
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.PACK, context(), max_moves=50)
    assert plan.moves == ()


def test_max_moves_and_host_selection_bound_the_plan() -> None:
    hosts = [capable(host(f"hv-0{i}")) for i in range(1, 5)]
    vms = [movable(f"vm-{i}", "hv-01") for i in range(8)]
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.SPREAD, context(), max_moves=2)
    assert len(plan.moves) == 2
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.SPREAD, context(), max_moves=50, hosts={"hv-01", "hv-04"})
    assert plan.moves
    assert {move.target for move in plan.moves} == {"hv-04"}


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[HostState], list[MovableVm]]:
    count = draw(st.integers(2, 6))
    hosts = [
        replace(
            host(
                f"hv-{i}",
                cpu=draw(st.sampled_from([8, 16, 32])),
                memory_mb=draw(st.sampled_from([16384, 65536])),
                labels={"zone": f"z{i % 2}"},
                status=draw(st.sampled_from(["online"] * 4 + ["offline"])),
            ),
            can_migrate=draw(st.booleans()) or i == 0,
        )
        for i in range(count)
    ]
    rules = [
        GroupRule(UUID(int=1), GroupPolicy.ANTI_AFFINITY, HOST_TOPOLOGY),
        GroupRule(UUID(int=2), GroupPolicy.AFFINITY, "zone"),
        GroupRule(UUID(int=3), GroupPolicy.ANTI_AFFINITY, "zone", max_per_domain=2),
    ]
    vms: list[MovableVm] = []
    room = {h.id: [h.capacity.cpu, h.capacity.memory_mb] for h in hosts}
    for index in range(draw(st.integers(0, 16))):
        on = draw(st.sampled_from(hosts)).id
        cpu, memory = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1024, 4096, 8192]))
        if room[on][0] < cpu or room[on][1] < memory:
            continue  # start from a fleet that fits
        room[on][0] -= cpu
        room[on][1] -= memory
        vms.append(
            movable(f"vm-{index}", on, cpu=cpu, memory_mb=memory, group=draw(st.sampled_from([None, None, *rules])))
        )
    return hosts, vms


@given(fleets(), st.sampled_from(list(Goal)), st.integers(1, 10))
@settings(max_examples=150, deadline=None)
def test_a_plan_applied_move_by_move_keeps_every_hard_rule_and_reaches_its_promised_score(
    world: tuple[list[HostState], list[MovableVm]], goal: Goal, max_moves: int
) -> None:
    hosts, vms = world
    plan = plan_rebalance(fleet_with(hosts, vms), vms, goal, context(), max_moves=max_moves)
    assert len(plan.moves) <= max_moves
    replay(hosts, vms, plan, goal)
    assert sum(move.gain for move in plan.moves) == pytest.approx(abs(plan.score_after - plan.score_before))
    if goal is Goal.SPREAD:
        assert plan.score_after <= plan.score_before + 1e-9
    else:
        assert plan.score_after >= plan.score_before


def test_group_members_the_snapshot_counts_keep_a_host_off_limits_even_without_a_movable_member_there() -> None:
    rule = GroupRule(UUID(int=1), GroupPolicy.ANTI_AFFINITY, HOST_TOPOLOGY)
    hosts = [capable(host(f"hv-0{i}")) for i in range(1, 4)]
    vms = [movable("a", "hv-01", cpu=8, group=rule)] + [movable(f"x-{i}", "hv-01") for i in range(3)]
    # A stopped member (not movable, not in ``vms``) holds hv-02: "a" may only go to hv-03.
    known = {rule.id: {"hv-01": 1, "hv-02": 1}}
    plan = plan_rebalance(fleet_with(hosts, vms), vms, Goal.SPREAD, context(), max_moves=50, group_members=known)
    moved_a = [move for move in plan.moves if move.vm_id == "a"]
    assert moved_a
    assert all(move.target == "hv-03" for move in moved_a)
