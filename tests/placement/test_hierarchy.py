"""The hierarchy's rules: the cluster_first planner (CloudStack's FirstFitPlanner) and clusters left
out after failures (VMSCHED_EXCLUDE_CLUSTER_AFTER), by example and against a plain-Python reference."""

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
    reference_eligible,
    reference_penalty,
    request,
)
from vmsched_contract.planner import Planner
from vmsched_placement import DecisionContext, Fleet, HostState, PlacementRequest, decide, explain
from vmsched_placement.model import Migration

CLUSTERS = ["c1", "c2", "c3"]


def test_cluster_first_picks_within_the_cluster_with_the_most_free_capacity() -> None:
    fleet = fleet_of(
        host("hv-1", labels={"cluster": "c1"}, cpu=16),  # least loaded host of all, in the smaller cluster
        host("hv-2", labels={"cluster": "c2"}, cpu=16, used_cpu=8),
        host("hv-3", labels={"cluster": "c2"}, cpu=16, used_cpu=4),
    )
    flat = decide(fleet, request(), context())
    assert (flat.host_id, flat.cluster) == ("hv-1", None)
    planned = decide(fleet, request(planner=Planner.CLUSTER_FIRST), context())
    assert (planned.host_id, planned.cluster) == ("hv-3", "c2")  # c2: 20 vCPUs free against c1's 16
    assert planned.ranked == ("hv-3", "hv-2")
    assert (planned.eligible, planned.preferred) == (3, 2)


def test_cluster_first_ranks_only_clusters_with_a_host_that_fits_and_hosts_without_one_last() -> None:
    fleet = fleet_of(
        host("hv-1"),  # no cluster
        host("hv-2", labels={"cluster": "big"}, cpu=64, used_cpu=63),  # much free memory, too little cpu
        host("hv-3", labels={"cluster": "small"}, cpu=8),
    )
    assert decide(fleet, request(cpu=4, planner=Planner.CLUSTER_FIRST), context()).cluster == "small"
    fleet.upsert(host("hv-3", labels={"cluster": "small"}, cpu=8, used_cpu=8))
    unclustered = decide(fleet, request(cpu=4, planner=Planner.CLUSTER_FIRST), context())
    assert (unclustered.host_id, unclustered.cluster) == ("hv-1", None)


@st.composite
def clustered(draw: st.DrawFn) -> list[HostState]:
    hosts = draw(host_lists)
    return [
        replace(h, labels={**h.labels, "cluster": c} if (c := draw(st.sampled_from([*CLUSTERS, None]))) else h.labels)
        for h in hosts
    ]


@settings(deadline=None)
@given(clustered(), placement_requests(), contexts())
def test_cluster_first_chooses_among_the_eligible_hosts_of_the_cluster_freest_on_cpu_then_memory(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    req = replace(req, planner=Planner.CLUSTER_FIRST)
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    eligible = reference_eligible(hosts, req, ctx)
    assert decision.eligible == len(eligible)
    if not eligible:
        assert decision.host_id is None
        return
    free: dict[str, tuple[float, float]] = {}
    for h in eligible:
        if "cluster" in h.labels:
            effective = Fleet.from_hosts([h]).columns.free[:2, 0]
            cpu, memory = free.get(h.labels["cluster"], (0.0, 0.0))
            free[h.labels["cluster"]] = (cpu + max(effective[0], 0.0), memory + max(effective[1], 0.0))
    if free:
        best = min(free, key=lambda c: (-free[c][0], -free[c][1], c))
        assert decision.cluster == best
        assert all(h.labels.get("cluster") == best for h in eligible if h.id in decision.ranked)
        in_best = [h for h in eligible if h.labels.get("cluster") == best]
        lowest = min(reference_penalty(h, req) for h in in_best)
        assert decision.preferred == sum(1 for h in in_best if reference_penalty(h, req) == lowest)
    else:
        assert decision.cluster is None
    assert decision.host_id in {h.id for h in eligible}


def test_a_cluster_holding_enough_failed_hosts_is_left_out_whole() -> None:
    fleet = fleet_of(
        host("hv-1", labels={"cluster": "c1"}),
        host("hv-2", labels={"cluster": "c1"}),
        host("hv-3", labels={"cluster": "c1"}),
        host("hv-4", labels={"cluster": "c2"}, used_cpu=12),
    )
    failed_once = request(exclude=["hv-1"])
    assert decide(fleet, replace(failed_once, exclude_cluster_after=2), context()).host_id == "hv-2"
    failed_twice = replace(request(exclude=["hv-1", "hv-2"]), exclude_cluster_after=2)
    decision = decide(fleet, failed_twice, context())
    assert (decision.host_id, dict(decision.rejections)) == ("hv-4", {"excluded": 3})
    reasons = {v.host_id: v.reason for v in explain(fleet, failed_twice, context())}
    assert reasons["hv-1"] == "excluded: excluded on retry"
    assert reasons["hv-3"] == "excluded: its cluster c1 is excluded (2 hosts there failed the VM)"
    # Off (0), or a migration's source (not a failure), leaves the cluster in.
    assert decide(fleet, replace(failed_twice, exclude_cluster_after=0), context()).host_id == "hv-3"
    movable = Fleet.from_hosts([replace(h, can_migrate=True) for h in fleet])
    moving = replace(failed_twice, migration=Migration("hv-2"))
    assert decide(movable, moving, context()).host_id == "hv-3"
