from __future__ import annotations

import pytest

from tests.placement.support import context, fleet_of, host, request
from vmsched_contract.strategy import Strategy
from vmsched_placement import (
    NO_AVAILABLE_AGENTS,
    Fleet,
    UnknownStrategyError,
    decide,
)
from vmsched_placement.model import PlacementRequest


def test_an_empty_fleet_has_no_available_agents() -> None:
    decision = decide(Fleet.from_hosts([]), request(), context())
    assert decision.host_id is None
    assert decision.reason == NO_AVAILABLE_AGENTS
    assert decision.ranked == ()
    assert (decision.considered, decision.eligible) == (0, 0)


def test_a_fleet_of_offline_and_draining_hosts_has_no_available_agents() -> None:
    fleet = fleet_of(host("hv-01", status="draining"), host("hv-02", heartbeat_age=60.0))
    decision = decide(fleet, request(), context())
    assert decision.reason == NO_AVAILABLE_AGENTS
    assert decision.rejections == {"offline": 2}


def test_online_hosts_that_are_all_excluded_are_excluded_not_unavailable() -> None:
    fleet = fleet_of(host("hv-01"), host("hv-02"))
    decision = decide(fleet, request(exclude=["hv-01", "hv-02"]), context())
    assert decision.reason == "excluded"
    assert decision.rejections == {"excluded": 2}


def test_the_reason_is_the_last_rule_that_rejected_a_host() -> None:
    # Two hosts lack the zone, the one in the zone is full: "memory", what stops the closest host.
    fleet = fleet_of(
        host("hv-01", memory_mb=2048, labels={"zone": "a"}),
        host("hv-02", labels={"zone": "b"}),
        host("hv-03", labels={"zone": "c"}),
        host("hv-04", paused=True),
    )
    decision = decide(fleet, request(memory_mb=4096, labels={"zone": "a"}), context())
    assert decision.host_id is None
    assert decision.reason == "memory"
    assert decision.rejections == {"paused": 1, "labels": 2, "memory": 1}
    assert list(decision.rejections) == ["paused", "labels", "memory"]  # filter order
    assert decision.eligible == 0


def test_a_label_nobody_has_is_reported_as_labels() -> None:
    fleet = fleet_of(host("hv-01"), host("hv-02", labels={"size": "small"}))
    decision = decide(fleet, request(labels={"zone": "z1"}), context())
    assert (decision.reason, dict(decision.rejections)) == ("labels", {"labels": 2})


def test_a_vm_asking_for_no_gpu_fits_a_host_over_capacity_on_gpus() -> None:
    # An agent reported fewer GPUs than are allocated on its host: only what the VM asks is checked.
    over = host("hv-01", gpu=1, used_gpu=2)
    assert decide(fleet_of(over), request(gpu=0), context()).host_id == "hv-01"
    refused = decide(fleet_of(over), request(gpu=1), context())
    assert (refused.host_id, refused.reason, dict(refused.rejections)) == (None, "gpu", {"gpu": 1})


def test_rejections_count_each_host_under_the_first_filter_it_fails() -> None:
    fleet = fleet_of(
        host("hv-01", status="offline", paused=True, cpu=0),  # offline first, not paused or cpu
        host("hv-02", paused=True, cpu=0),  # paused first
        host("hv-03", cpu=0, labels={}),  # labels first, not cpu
        host("hv-05", cpu=0, labels={"zone": "a"}),  # cpu
        host("hv-04", labels={"zone": "a"}),
    )
    decision = decide(fleet, request(cpu=1, labels={"zone": "a"}), context())
    assert decision.host_id == "hv-04"
    assert decision.rejections == {"offline": 1, "paused": 1, "labels": 1, "cpu": 1}
    assert (decision.considered, decision.eligible) == (5, 1)


def test_ranked_holds_the_chosen_host_and_up_to_the_requested_fallbacks() -> None:
    fleet = fleet_of(*(host(f"hv-{n:02d}", used_cpu=n) for n in range(10)))
    assert decide(fleet, request(), context()).ranked == ("hv-00", "hv-01", "hv-02", "hv-03", "hv-04")
    assert decide(fleet, request(), context(), fallbacks=0).ranked == ("hv-00",)
    assert len(decide(fleet_of(host("hv-01"), host("hv-02")), request(), context(), fallbacks=9).ranked) == 2


def test_a_request_naming_no_known_strategy_is_refused() -> None:
    bogus = PlacementRequest("vm", "vm", request().demand, {}, "worst_fit")  # type: ignore[arg-type]
    with pytest.raises(UnknownStrategyError, match="worst_fit"):
        decide(fleet_of(host()), bogus, context())


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy_places_on_the_only_eligible_host(strategy: Strategy) -> None:
    fleet = fleet_of(host("hv-01", paused=True), host("hv-02"), host("hv-03", status="draining"))
    decision = decide(fleet, request(strategy=strategy), context(cursor=5, seed=9))
    assert decision.host_id == "hv-02"
    assert decision.strategy is strategy


def test_a_decision_does_not_change_the_fleet() -> None:
    fleet = fleet_of(host("hv-01", used_cpu=3), host("hv-02"))
    before = list(fleet)
    for strategy in Strategy:
        decide(fleet, request(strategy=strategy, labels={"zone": "a"}, exclude=["hv-02"]), context())
    assert list(fleet) == before
