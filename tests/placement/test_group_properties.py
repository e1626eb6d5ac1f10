"""Server groups on random fleets: the engine never returns a host a group's hard rule forbids, and
finds no host only when no host passes every hard rule; checked against a plain-Python reference."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.support import (
    HOST_IDS,
    LABEL_VALUES,
    contexts,
    group,
    host_lists,
    placement_requests,
    reference_first_failure,
    reference_online,
    reference_penalty,
    reference_reason,
)
from vmsched_contract.groups import GroupPolicy
from vmsched_placement import DecisionContext, Fleet, HostState, PlacementRequest, decide, explain
from vmsched_placement.model import PlacementGroup

GATES = ("excluded", "offline", "paused", "dedicated", "labels", "host_selector", "taints", "network")


@st.composite
def groups(draw: st.DrawFn) -> PlacementGroup:
    key = draw(st.sampled_from(["host", "zone", "rack"]))
    domains = HOST_IDS if key == "host" else LABEL_VALUES
    members = draw(st.dictionaries(st.sampled_from(domains), st.integers(0, 3), max_size=6))
    return group(
        draw(st.sampled_from(list(GroupPolicy))),
        members,
        key=key,
        max_per_domain=draw(st.integers(1, 3)),
        max_skew=draw(st.integers(1, 2)),
    )


def domain(h: HostState, g: PlacementGroup) -> str | None:
    return h.id if g.rule.topology_key == "host" else h.labels.get(g.rule.topology_key)


def members_in(h: HostState, g: PlacementGroup) -> int:
    found = domain(h, g)
    return 0 if found is None else g.members.get(found, 0)


def reference_group_refuses(h: HostState, g: PlacementGroup) -> bool:
    """anti-affinity and affinity, one host at a time."""
    if g.rule.policy not in (GroupPolicy.ANTI_AFFINITY, GroupPolicy.AFFINITY):
        return False
    if domain(h, g) is None:
        return True
    if g.rule.policy is GroupPolicy.ANTI_AFFINITY:
        return members_in(h, g) >= g.rule.max_per_domain
    anywhere = sum(g.members.values())
    return anywhere > 0 and members_in(h, g) == 0


def reference_failures(hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext) -> dict[str, str | None]:
    """Per host, the first rule it fails (None: it passes every one)."""
    g = req.group
    assert g is not None
    by_id = {h.id: h for h in hosts}
    failures: dict[str, str | None] = {}
    for host_id, h in by_id.items():
        base = reference_first_failure(h, req, ctx)
        if base in GATES:
            failures[host_id] = base
        elif reference_group_refuses(h, g):
            failures[host_id] = "server_group"
        else:
            failures[host_id] = base
    if g.rule.policy is GroupPolicy.SPREAD:
        eligible = {domain(by_id[i], g) for i, failed in failures.items() if failed is None} - {None}
        lowest = min((g.members.get(str(d), 0) for d in eligible), default=0)
        for host_id, failed in failures.items():
            h = by_id[host_id]
            if failed is None and (domain(h, g) is None or members_in(h, g) + 1 - lowest > g.rule.max_skew):
                failures[host_id] = "spread"
    return failures


def reference_group_penalty(h: HostState, g: PlacementGroup) -> int:
    if g.rule.policy is GroupPolicy.SOFT_ANTI_AFFINITY:
        return members_in(h, g)
    if g.rule.policy is GroupPolicy.SOFT_AFFINITY and sum(g.members.values()) > 0:
        return int(members_in(h, g) == 0)
    return 0


@settings(deadline=None, max_examples=300)
@given(host_lists, placement_requests(), groups(), contexts())
def test_decide_never_picks_a_host_a_group_forbids_and_finds_none_only_when_none_passes(
    hosts: list[HostState], req: PlacementRequest, g: PlacementGroup, ctx: DecisionContext
) -> None:
    req = replace(req, group=g)
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    failures = reference_failures(hosts, req, ctx)
    passing = sorted(host_id for host_id, failed in failures.items() if failed is None)

    assert decision.eligible == len(passing)
    assert dict(decision.rejections) == dict(Counter(f for f in failures.values() if f is not None))
    for host_id in decision.ranked:
        assert failures[host_id] is None
    if passing:
        assert decision.host_id is not None
        by_id = {h.id: h for h in hosts}

        def penalty(host_id: str) -> int:
            # Every weigher's, summed as the engine sums them: the group's soft policy is one of them.
            return reference_group_penalty(by_id[host_id], g) + reference_penalty(by_id[host_id], req)

        assert penalty(decision.host_id) == min(penalty(host_id) for host_id in passing)
    else:
        assert decision.host_id is None
        online = any(reference_online(h, ctx) for h in {h.id: h for h in hosts}.values())
        assert decision.reason == reference_reason(Counter(failures.values()), online)


@settings(deadline=None, max_examples=100)
@given(host_lists, placement_requests(), groups(), contexts())
def test_explain_agrees_with_decide_for_a_vm_of_a_group(
    hosts: list[HostState], req: PlacementRequest, g: PlacementGroup, ctx: DecisionContext
) -> None:
    req = replace(req, group=g)
    fleet = Fleet.from_hosts(hosts)
    decision = decide(fleet, req, ctx)
    verdicts = explain(fleet, req, ctx)
    assert sum(v.passed for v in verdicts) == decision.eligible
    assert dict(Counter(v.filter for v in verdicts if not v.passed)) == dict(decision.rejections)
    for verdict in verdicts:
        if not verdict.passed and verdict.filter in ("server_group", "spread"):
            assert verdict.reason is not None
            assert verdict.reason.startswith(f"{verdict.filter}: ")
