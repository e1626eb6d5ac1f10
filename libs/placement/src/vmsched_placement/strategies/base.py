"""The strategy extension point: how one host is picked among those that pass every filter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vmsched_contract.strategy import Strategy
    from vmsched_placement.fleet import BoolArray, FleetColumns, FloatArray
    from vmsched_placement.model import DecisionContext, RequestVector


@dataclass(frozen=True, slots=True)
class Ranking:
    """Rows of the chosen host and its fallbacks, best first, and their scores (None for a strategy
    that does not score hosts)."""

    indices: tuple[int, ...]
    scores: tuple[float, ...] | None

    @property
    def score(self) -> float | None:
        """The chosen host's score."""
        return None if self.scores is None else self.scores[0]


@runtime_checkable
class PlacementStrategy(Protocol):
    """A placement strategy. ``NAME`` is the ``Strategy`` value requests name it by."""

    NAME: Strategy
    # Whether its ranking reads the hosts' measured usage (``HostState.usage``): the decision journal
    # keeps a host's new usage only for the decisions that read it.
    READS_MEASURED_USAGE: bool

    def rank(
        self,
        columns: FleetColumns,
        request: RequestVector,
        eligible: BoolArray,
        eligible_count: int,
        context: DecisionContext,
        limit: int,
    ) -> Ranking:
        """Up to ``limit`` eligible rows, best first. ``eligible_count`` >= 1 is ``eligible.sum()``.

        Deterministic for the same fleet, request and context; ties go to the lowest host id.
        """
        ...

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        """Every host's score (lower is better), or None when the strategy does not score hosts."""
        ...
