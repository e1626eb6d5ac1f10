from __future__ import annotations

from tests.placement.support import context, fleet_of, host, request
from vmsched_contract.strategy import Strategy
from vmsched_placement import decide

ROUND_ROBIN = Strategy.ROUND_ROBIN


def test_round_robin_takes_eligible_hosts_in_id_order_by_cursor() -> None:
    fleet = fleet_of(host("hv-03"), host("hv-01"), host("hv-02"))
    picks = [decide(fleet, request(strategy=ROUND_ROBIN), context(cursor=c)).host_id for c in range(5)]
    assert picks == ["hv-01", "hv-02", "hv-03", "hv-01", "hv-02"]


def test_round_robin_skips_hosts_that_do_not_pass() -> None:
    fleet = fleet_of(host("hv-01"), host("hv-02", paused=True), host("hv-03"))
    picks = [decide(fleet, request(strategy=ROUND_ROBIN), context(cursor=c)).host_id for c in range(4)]
    assert picks == ["hv-01", "hv-03", "hv-01", "hv-03"]


def test_round_robin_falls_back_to_the_next_hosts_of_the_cycle() -> None:
    fleet = fleet_of(host("hv-01"), host("hv-02"), host("hv-03"))
    decision = decide(fleet, request(strategy=ROUND_ROBIN), context(cursor=2))
    assert decision.ranked == ("hv-03", "hv-01", "hv-02")
    assert decision.score is None


def test_round_robin_ignores_load() -> None:
    fleet = fleet_of(host("hv-01", used_cpu=15), host("hv-02"))
    assert decide(fleet, request(strategy=ROUND_ROBIN), context(cursor=0)).host_id == "hv-01"
