"""vmsched's placement engine: which host each VM goes on, decided by filters, weighers and strategies
over a columnar fleet. Pure and fast: no I/O, no clock, no randomness it is not handed.

The scheduler service keeps a ``Fleet`` in memory (refreshed from the Redis snapshot), builds a
``PlacementRequest`` and a ``DecisionContext`` per VM, and calls ``decide``; ``explain`` spells out
every host's verdict when a person asks or a VM is unschedulable.
"""

from __future__ import annotations

from vmsched_placement.engine import (
    NO_AVAILABLE_AGENTS,
    Decision,
    HostVerdict,
    decide,
    explain,
    rejected_examples,
    verdict,
)
from vmsched_placement.filters import FILTER_NAMES, FILTERS, FILTERS_BY_NAME, HostFilter
from vmsched_placement.fleet import Fleet, FleetColumns
from vmsched_placement.log_lines import decision_log_lines, scheduling_line, selected_line
from vmsched_placement.model import (
    DecisionContext,
    Demand,
    HostState,
    PlacementRequest,
    RequestVector,
    SelectorTerm,
    Weights,
)
from vmsched_placement.strategies import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    VALID_STRATEGIES,
    PlacementStrategy,
    Ranking,
    UnknownStrategyError,
    strategy_for,
)
from vmsched_placement.taint_rules import Taint, Toleration
from vmsched_placement.weighers import WEIGHER_NAMES, WEIGHERS, HostWeigher

__all__ = [
    "DEFAULT_STRATEGY",
    "FILTERS",
    "FILTERS_BY_NAME",
    "FILTER_NAMES",
    "NO_AVAILABLE_AGENTS",
    "STRATEGIES",
    "VALID_STRATEGIES",
    "WEIGHERS",
    "WEIGHER_NAMES",
    "Decision",
    "DecisionContext",
    "Demand",
    "Fleet",
    "FleetColumns",
    "HostFilter",
    "HostState",
    "HostVerdict",
    "HostWeigher",
    "PlacementRequest",
    "PlacementStrategy",
    "Ranking",
    "RequestVector",
    "SelectorTerm",
    "Taint",
    "Toleration",
    "UnknownStrategyError",
    "Weights",
    "decide",
    "decision_log_lines",
    "explain",
    "rejected_examples",
    "scheduling_line",
    "selected_line",
    "strategy_for",
    "verdict",
]
