"""Every registered filter, weigher and strategy satisfies its extension point's protocol."""

from __future__ import annotations

import pytest

from vmsched_contract.strategy import Strategy
from vmsched_domain.fit import RESOURCE_NAMES
from vmsched_placement import (
    FILTER_NAMES,
    FILTERS,
    FILTERS_BY_NAME,
    STRATEGIES,
    VALID_STRATEGIES,
    WEIGHER_NAMES,
    WEIGHERS,
    HostFilter,
    HostWeigher,
    PlacementStrategy,
)
from vmsched_placement.filters.resources import ResourceFilter
from vmsched_placement.weighers import WEIGHERS_BY_NAME


@pytest.mark.parametrize("host_filter", FILTERS, ids=lambda f: f.NAME)
def test_every_filter_satisfies_the_filter_protocol(host_filter: HostFilter) -> None:
    assert isinstance(host_filter, HostFilter)
    assert FILTERS_BY_NAME[host_filter.NAME] is host_filter


def test_filters_run_in_the_documented_order() -> None:
    assert FILTER_NAMES == (
        "excluded",
        "migration",
        "offline",
        "paused",
        "dedicated",
        "labels",
        "host_selector",
        "taints",
        "network",
        "server_group",
        "cpu",
        "memory",
        "disk",
        "gpu",
        "extra",
        "storage",
        "ha_reserve",
        "spread",
    )


@pytest.mark.parametrize("weigher", WEIGHERS, ids=lambda w: w.NAME)
def test_every_weigher_satisfies_the_weigher_protocol(weigher: HostWeigher) -> None:
    assert isinstance(weigher, HostWeigher)
    assert WEIGHERS_BY_NAME[weigher.NAME] is weigher


def test_weighers_are_the_documented_ones() -> None:
    assert WEIGHER_NAMES == ("taints", "gpu_affinity", "server_group")


def test_the_resource_filters_are_the_fit_rules_resources_in_its_order() -> None:
    resource_filters = [f for f in FILTERS if isinstance(f, ResourceFilter)]
    assert [f.NAME for f in resource_filters] == list(RESOURCE_NAMES)
    assert [f.RESOURCE for f in resource_filters] == list(range(len(RESOURCE_NAMES)))


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy_value_has_a_plugin_satisfying_the_strategy_protocol(strategy: Strategy) -> None:
    plugin = STRATEGIES[strategy]
    assert isinstance(plugin, PlacementStrategy)
    assert plugin.NAME is strategy


def test_valid_strategies_are_the_seed_names() -> None:
    assert {
        "least_loaded",
        "best_fit",
        "round_robin",
        "random",
        "least_utilized",
        "first_fit",
        "fewest_vms",
        "most_vms",
        "user_concentrated",
    } == VALID_STRATEGIES
