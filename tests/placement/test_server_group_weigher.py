from __future__ import annotations

import numpy as np

from tests.placement.support import context, fleet_of, group, host, request
from vmsched_contract.groups import GroupPolicy
from vmsched_contract.strategy import Strategy
from vmsched_placement import HostState, PlacementRequest, RequestVector, decide
from vmsched_placement.weighers import ServerGroupWeigher

SOFT_ANTI = GroupPolicy.SOFT_ANTI_AFFINITY
SOFT_AFFINITY = GroupPolicy.SOFT_AFFINITY


def kept(hosts: list[HostState], req: PlacementRequest) -> list[bool]:
    """Which hosts the weigher leaves among the preferred (the least penalised) when every host is
    eligible: all of them when it has no opinion."""
    fleet = fleet_of(*hosts)
    penalty = ServerGroupWeigher().penalty(fleet.columns, RequestVector.of(req, context()))
    if penalty is None:
        return [True] * len(hosts)
    values = np.asarray(penalty, dtype=np.float64)
    return [bool(value == values.min()) for value in values.tolist()]


def test_the_weigher_prefers_nothing_for_a_vm_of_no_group_or_a_hard_one() -> None:
    hosts = [host("hv-01"), host("hv-02")]
    for req in (request(), request(in_group=group(GroupPolicy.ANTI_AFFINITY, {"hv-01": 1}))):
        assert kept(hosts, req) == [True, True]


def test_soft_anti_affinity_keeps_the_domains_with_fewest_members() -> None:
    hosts = [
        host("hv-01", labels={"zone": "a"}),
        host("hv-02", labels={"zone": "b"}),
        host("hv-03", labels={"zone": "b"}),
    ]
    assert kept(hosts, request(in_group=group(SOFT_ANTI, {"a": 2, "b": 1}, key="zone"))) == [False, True, True]
    assert kept(hosts, request(in_group=group(SOFT_ANTI, {"hv-02": 1, "hv-03": 2}))) == [True, False, False]


def test_soft_anti_affinity_counts_a_host_without_the_label_as_an_empty_domain() -> None:
    hosts = [host("hv-01", labels={"zone": "a"}), host("hv-02")]
    assert kept(hosts, request(in_group=group(SOFT_ANTI, {"a": 1}, key="zone"))) == [False, True]


def test_soft_anti_affinity_picks_the_emptiest_host_over_the_strategys_favourite() -> None:
    busy_but_empty_of_the_group = host("hv-01", used_cpu=12)
    idle_with_a_member = host("hv-02")
    req = request(in_group=group(SOFT_ANTI, {"hv-02": 1}), strategy=Strategy.LEAST_LOADED)
    decision = decide(fleet_of(busy_but_empty_of_the_group, idle_with_a_member), req, context())
    assert decision.host_id == "hv-01"
    assert decision.eligible == 2


def test_soft_anti_affinity_never_refuses_when_every_host_holds_a_member() -> None:
    req = request(in_group=group(SOFT_ANTI, {"hv-01": 1, "hv-02": 1}))
    assert decide(fleet_of(host("hv-01"), host("hv-02", used_cpu=4)), req, context()).host_id == "hv-01"


def test_soft_affinity_prefers_the_members_domain() -> None:
    req = request(in_group=group(SOFT_AFFINITY, {"b": 1}, key="zone"))
    fleet = fleet_of(host("hv-01", labels={"zone": "a"}), host("hv-02", labels={"zone": "b"}, used_cpu=10))
    assert decide(fleet, req, context()).host_id == "hv-02"


def test_soft_affinity_goes_elsewhere_when_the_members_domain_is_full() -> None:
    req = request(cpu=4, in_group=group(SOFT_AFFINITY, {"b": 1}, key="zone"))
    fleet = fleet_of(host("hv-01", labels={"zone": "a"}), host("hv-02", labels={"zone": "b"}, cpu=4, used_cpu=4))
    assert decide(fleet, req, context()).host_id == "hv-01"


def test_soft_affinity_without_members_prefers_nothing() -> None:
    assert kept([host("hv-01"), host("hv-02")], request(in_group=group(SOFT_AFFINITY, {}))) == [True, True]
