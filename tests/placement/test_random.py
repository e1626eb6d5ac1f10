from __future__ import annotations

from collections import Counter

from tests.placement.support import context, fleet_of, host, request
from vmsched_contract.strategy import Strategy
from vmsched_placement import decide

RANDOM = Strategy.RANDOM


def test_random_is_repeatable_with_the_same_seed() -> None:
    fleet = fleet_of(*(host(f"hv-{n}") for n in range(10)))
    first = [decide(fleet, request(strategy=RANDOM), context(seed=s)).ranked for s in range(20)]
    again = [decide(fleet, request(strategy=RANDOM), context(seed=s)).ranked for s in range(20)]
    assert first == again


def test_random_picks_only_eligible_hosts_and_all_of_them() -> None:
    fleet = fleet_of(host("hv-1"), host("hv-2", status="draining"), host("hv-3"), host("hv-4", paused=True))
    picks = Counter(decide(fleet, request(strategy=RANDOM), context(seed=s)).host_id for s in range(400))
    assert set(picks) == {"hv-1", "hv-3"}
    assert min(picks.values()) > 150  # roughly even: 200 each expected


def test_random_fallbacks_are_distinct_eligible_hosts() -> None:
    fleet = fleet_of(*(host(f"hv-{n}") for n in range(6)))
    decision = decide(fleet, request(strategy=RANDOM), context(seed=3), fallbacks=4)
    assert len(decision.ranked) == 5
    assert len(set(decision.ranked)) == 5
    assert decision.host_id == decision.ranked[0]
