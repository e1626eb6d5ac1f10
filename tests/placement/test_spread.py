from __future__ import annotations

from tests.placement.filter_checks import passes
from tests.placement.support import context, fleet_of, group, host, request
from vmsched_contract.groups import GroupPolicy
from vmsched_placement import HostState, PlacementRequest, RequestVector, decide
from vmsched_placement.filters import SPREAD_FILTER

SPREAD = GroupPolicy.SPREAD


def zones(*names: str, **kwargs: object) -> list[HostState]:
    return [host(f"hv-{n:02d}", labels={"zone": name}, **kwargs) for n, name in enumerate(names)]  # type: ignore[arg-type]


def mask_of(hosts: list[HostState], req: PlacementRequest) -> list[bool]:
    mask = SPREAD_FILTER.mask(fleet_of(*hosts).columns, RequestVector.of(req, context()))
    assert mask is not None
    return [bool(passed) for passed in mask.tolist()]


def test_spread_sets_no_constraint_for_other_policies() -> None:
    req = request(in_group=group(GroupPolicy.ANTI_AFFINITY, {"a": 9}, key="zone"))
    assert SPREAD_FILTER.mask(fleet_of(*zones("a")).columns, RequestVector.of(req, context())) is None


def test_spread_passes_the_domains_within_max_skew_of_the_emptiest() -> None:
    req = request(in_group=group(SPREAD, {"a": 2, "b": 1, "c": 1}, key="zone"))
    assert mask_of(zones("a", "b", "c"), req) == [False, True, True]


def test_spread_with_a_larger_skew_lets_a_domain_run_ahead() -> None:
    req = request(in_group=group(SPREAD, {"a": 2, "b": 1, "c": 1}, key="zone", max_skew=2))
    assert mask_of(zones("a", "b", "c"), req) == [True, True, True]


def test_spread_ignores_a_zone_whose_hosts_fail_another_filter() -> None:
    # zone c's only host is full: it is no eligible domain, so its 0 members hold nobody back.
    full = host("hv-09", labels={"zone": "c"}, cpu=1, used_cpu=1)
    req = request(cpu=1, in_group=group(SPREAD, {"a": 1, "b": 1}, key="zone"))
    hosts = [*zones("a", "b"), full]
    assert mask_of(hosts, req)[:2] == [True, True]
    decision = decide(fleet_of(*hosts), req, context())
    assert decision.host_id in {"hv-00", "hv-01"}
    assert SPREAD_FILTER.domains(fleet_of(*hosts).columns, RequestVector.of(req, context())) == ["a", "b"]


def test_spread_counts_an_empty_eligible_zone() -> None:
    req = request(in_group=group(SPREAD, {"a": 1}, key="zone"))
    assert mask_of(zones("a", "b"), req) == [False, True]


def test_spread_takes_no_member_on_a_host_without_the_label() -> None:
    req = request(in_group=group(SPREAD, {}, key="zone"))
    assert not passes(SPREAD_FILTER, host("hv-01", labels={}), req)
    assert SPREAD_FILTER.reason(fleet_of(host("hv-01")), 0, RequestVector.of(req, context())) == (
        "spread: host has no zone label (in no domain of the group)"
    )


def test_spread_reason_names_the_counts() -> None:
    hosts = zones("a", "b")
    req = request(in_group=group(SPREAD, {"a": 3, "b": 2}, key="zone"))
    fleet = fleet_of(*hosts)
    assert SPREAD_FILTER.reason(fleet, 0, RequestVector.of(req, context())) == (
        "spread: zone=a would hold 4 members, the emptiest eligible domain 2 (max_skew 1)"
    )


def test_spread_over_hosts_fills_every_host_before_any_gets_a_second() -> None:
    req = request(in_group=group(SPREAD, {"hv-00": 1, "hv-01": 1}))
    assert mask_of(zones("a", "a", "a"), req) == [False, False, True]
