"""The placement strategies, keyed by the ``Strategy`` value a request names."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from vmsched_contract.strategy import Strategy
from vmsched_placement.strategies.base import PlacementStrategy, Ranking
from vmsched_placement.strategies.best_fit import BestFit
from vmsched_placement.strategies.first_fit import FirstFit
from vmsched_placement.strategies.least_loaded import LeastLoaded
from vmsched_placement.strategies.least_utilized import LeastUtilized
from vmsched_placement.strategies.random_choice import RandomChoice
from vmsched_placement.strategies.round_robin import RoundRobin
from vmsched_placement.strategies.user_concentrated import UserConcentrated
from vmsched_placement.strategies.vm_count import FewestVms, MostVms

STRATEGIES: Mapping[Strategy, PlacementStrategy] = MappingProxyType(
    {
        s.NAME: s
        for s in (
            LeastLoaded(),
            BestFit(),
            RoundRobin(),
            RandomChoice(),
            LeastUtilized(),
            FirstFit(),
            FewestVms(),
            MostVms(),
            UserConcentrated(),
        )
    }
)
VALID_STRATEGIES: frozenset[str] = frozenset(strategy.value for strategy in STRATEGIES)
DEFAULT_STRATEGY = Strategy.LEAST_LOADED


class UnknownStrategyError(ValueError):
    """A request named a strategy no plugin implements (the seed's ``invalidStrategy``)."""


def strategy_for(name: Strategy | str) -> PlacementStrategy:
    """The plugin for a strategy name; raises ``UnknownStrategyError`` for anything else."""
    try:
        return STRATEGIES[Strategy(name)]
    except (KeyError, ValueError):
        raise UnknownStrategyError(f"unknown strategy {name!r}; valid: {', '.join(sorted(VALID_STRATEGIES))}") from None


def reads_measured_usage(name: Strategy) -> bool:
    """Whether strategy ``name`` ranks hosts by their measured usage (``HostState.usage``)."""
    return strategy_for(name).READS_MEASURED_USAGE


__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "VALID_STRATEGIES",
    "BestFit",
    "FewestVms",
    "FirstFit",
    "LeastLoaded",
    "LeastUtilized",
    "MostVms",
    "PlacementStrategy",
    "RandomChoice",
    "Ranking",
    "RoundRobin",
    "UnknownStrategyError",
    "UserConcentrated",
    "reads_measured_usage",
    "strategy_for",
]
