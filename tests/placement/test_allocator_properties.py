"""The seeds' allocators (first_fit, fewest_vms, most_vms, user_concentrated) on random fleets,
against the plain-Python reference: the eligible hosts the weighers prefer, ranked by the rule
spelled out one host at a time, ties to the lowest id."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.support import (
    context,
    contexts,
    fleet_of,
    host,
    host_lists,
    placement_requests,
    reference_preferred,
    request,
)
from vmsched_contract.strategy import Strategy
from vmsched_placement import DecisionContext, Fleet, HostState, PlacementRequest, decide

PODS = ["p1", "p2", "p3"]


def _ranked(decision_ranked: tuple[str, ...], expected: list[tuple[float, str]]) -> None:
    assert decision_ranked == tuple(host_id for _, host_id in expected[:5])


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.FIRST_FIT), contexts())
def test_first_fit_takes_the_first_preferred_hosts_in_id_order(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    expected = [h.id for h in sorted(reference_preferred(hosts, req, ctx), key=lambda h: h.id)]
    assert decision.ranked == tuple(expected[:5])
    assert decision.score is None


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.FEWEST_VMS), contexts())
def test_fewest_vms_ranks_by_fewest_vms_then_lowest_id(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    expected = sorted((float(h.vm_count), h.id) for h in reference_preferred(hosts, req, ctx))
    _ranked(decision.ranked, expected)
    if expected:
        assert decision.score == expected[0][0]


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.MOST_VMS), contexts())
def test_most_vms_ranks_by_most_vms_then_lowest_id(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    expected = sorted((-float(h.vm_count), h.id) for h in reference_preferred(hosts, req, ctx))
    _ranked(decision.ranked, expected)


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.FEWEST_VMS), contexts(), st.data())
def test_vm_counts_stay_current_as_vms_are_booked_and_released(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext, data: st.DataObject
) -> None:
    """A round books each decision on its fleet before the next: the kept count column must equal
    one built afresh from the booked hosts."""
    fleet = Fleet.from_hosts(hosts)
    for strategy in data.draw(st.lists(st.sampled_from([Strategy.FEWEST_VMS, Strategy.MOST_VMS]), max_size=6)):
        asked = replace(req, strategy=strategy)
        decision = decide(fleet, asked, ctx)
        if decision.host_id is None:
            break
        if data.draw(st.booleans()):
            fleet.allocate(decision.host_id, req.demand)
        else:
            fleet.release(decision.host_id, req.demand)
        afresh = decide(Fleet.from_hosts(list(fleet)), asked, ctx)
        again = decide(fleet, asked, ctx)
        assert (again.ranked, again.scores) == (afresh.ranked, afresh.scores)


@st.composite
def podded(draw: st.DrawFn) -> list[HostState]:
    """Hosts of any kind, most in one of a few pods."""
    hosts = draw(host_lists)
    return [
        replace(h, labels={**h.labels, "pod": pod} if (pod := draw(st.sampled_from([*PODS, None]))) else h.labels)
        for h in hosts
    ]


project_pod_counts = st.dictionaries(st.sampled_from([*PODS, "gone"]), st.integers(0, 9), max_size=4)


@settings(deadline=None)
@given(podded(), placement_requests(Strategy.USER_CONCENTRATED), project_pod_counts, contexts())
def test_user_concentrated_ranks_pods_by_the_projects_vms_then_hosts_by_lowest_id(
    hosts: list[HostState], req: PlacementRequest, pods: dict[str, int], ctx: DecisionContext
) -> None:
    req = replace(req, project_pods=pods)
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    expected = sorted(
        (-float(pods.get(h.labels.get("pod", ""), 0) if "pod" in h.labels else 0), h.id)
        for h in reference_preferred(hosts, req, ctx)
    )
    _ranked(decision.ranked, expected)
    if expected:
        assert decision.score == expected[0][0]


def test_user_concentrated_goes_to_the_pod_where_the_project_runs_most_even_when_busier() -> None:
    fleet = fleet_of(
        host("hv-1", labels={"pod": "p1"}),
        host("hv-2", labels={"pod": "p2"}, used_cpu=12, vm_count=6),
        host("hv-3", labels={"pod": "p2"}),
    )
    decision = decide(fleet, replace(request(strategy=Strategy.USER_CONCENTRATED), project_pods={"p2": 3}), context())
    assert decision.ranked[:2] == ("hv-2", "hv-3")
    assert decision.score == -3.0
    # A project with no VMs anywhere: first fit.
    assert decide(fleet, request(strategy=Strategy.USER_CONCENTRATED), context()).host_id == "hv-1"


def test_fewest_and_most_vms_are_orchards_distribute_load_and_optimize_utilization() -> None:
    fleet = fleet_of(host("hv-1", vm_count=3), host("hv-2", vm_count=1), host("hv-3", vm_count=5, cpu=64))
    assert decide(fleet, request(strategy=Strategy.FEWEST_VMS), context()).host_id == "hv-2"
    assert decide(fleet, request(strategy=Strategy.MOST_VMS), context()).host_id == "hv-3"
    assert decide(fleet, request(strategy=Strategy.FIRST_FIT), context()).ranked == ("hv-1", "hv-2", "hv-3")
