from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import context, fleet_of, group, host, request
from vmsched_contract.groups import GroupPolicy
from vmsched_placement import RequestVector
from vmsched_placement.filters import ServerGroupFilter

ANTI = GroupPolicy.ANTI_AFFINITY
AFFINITY = GroupPolicy.AFFINITY


def test_server_group_sets_no_constraint_for_a_vm_of_no_group_or_a_soft_one() -> None:
    fleet = fleet_of(host("hv-01"))
    for req in (request(), request(in_group=group(GroupPolicy.SOFT_ANTI_AFFINITY, {"hv-01": 3}))):
        assert ServerGroupFilter().mask(fleet.columns, RequestVector.of(req, context())) is None


def test_anti_affinity_passes_a_host_without_members() -> None:
    assert passes(ServerGroupFilter(), host("hv-01"), request(in_group=group(ANTI, {"hv-02": 1})))


def test_anti_affinity_fails_a_host_holding_max_per_domain_members() -> None:
    full = request(in_group=group(ANTI, {"hv-01": 2}, max_per_domain=2))
    assert not passes(ServerGroupFilter(), host("hv-01"), full)
    assert reason(ServerGroupFilter(), host("hv-01"), full) == (
        "server_group: 2 members of the group in host=hv-01 already (anti-affinity, at most 2)"
    )
    assert passes(ServerGroupFilter(), host("hv-01"), request(in_group=group(ANTI, {"hv-01": 1}, max_per_domain=2)))


def test_anti_affinity_by_zone_counts_every_host_of_the_zone() -> None:
    fleet = fleet_of(
        host("hv-01", labels={"zone": "a"}), host("hv-02", labels={"zone": "a"}), host("hv-03", labels={"zone": "b"})
    )
    req = request(in_group=group(ANTI, {"a": 1}, key="zone"))
    mask = ServerGroupFilter().mask(fleet.columns, RequestVector.of(req, context()))
    assert mask is not None
    assert mask.tolist() == [False, False, True]


def test_a_host_without_the_topology_label_takes_no_member() -> None:
    unlabelled = host("hv-01", labels={"rack": "r1"})
    for policy in (ANTI, AFFINITY):
        req = request(in_group=group(policy, {}, key="zone"))
        assert not passes(ServerGroupFilter(), unlabelled, req)
        assert reason(ServerGroupFilter(), unlabelled, req) == (
            "server_group: host has no zone label (in no domain of the group)"
        )


def test_affinity_passes_any_host_while_the_group_has_no_member() -> None:
    assert passes(ServerGroupFilter(), host("hv-07"), request(in_group=group(AFFINITY, {})))
    zoned = host("hv-07", labels={"zone": "c"})
    assert passes(ServerGroupFilter(), zoned, request(in_group=group(AFFINITY, {}, key="zone")))


def test_affinity_passes_only_the_domain_of_the_members() -> None:
    fleet = fleet_of(
        host("hv-01", labels={"zone": "a"}), host("hv-02", labels={"zone": "b"}), host("hv-03", labels={"zone": "b"})
    )
    req = request(in_group=group(AFFINITY, {"b": 2}, key="zone"))
    mask = ServerGroupFilter().mask(fleet.columns, RequestVector.of(req, context()))
    assert mask is not None
    assert mask.tolist() == [False, True, True]
    assert reason(ServerGroupFilter(), host("hv-01", labels={"zone": "a"}), req) == (
        "server_group: the group's members are in zone=b, not a (affinity)"
    )


def test_affinity_to_a_host_that_left_the_fleet_passes_no_host() -> None:
    assert not passes(ServerGroupFilter(), host("hv-01"), request(in_group=group(AFFINITY, {"hv-09": 1})))
