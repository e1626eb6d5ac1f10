"""The scoring math every scored strategy shares: weighted sums of per-resource shares, lowest wins.

Elementwise numpy arithmetic in a fixed order, so a host's score is bit-identical to the same
formula evaluated in plain Python, and equal shares give equal scores (ties then go to the lowest
host id, which is the lowest row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vmsched_placement.fleet import BoolArray, FleetColumns, FloatArray
from vmsched_placement.model import CPU, DISK, MEMORY, DecisionContext, RequestVector, Weights
from vmsched_placement.scratch import Scratch
from vmsched_placement.strategies.base import Ranking

# Added to the scores of hosts that failed a filter: above any real score (shares are finite and
# far below it), finite so that 0 x it is 0 (inf would give NaN), cheaper than a masked copy.
INELIGIBLE_PENALTY = 1e300


def weighted_sum(
    weights: Weights, cpu: FloatArray, memory: FloatArray, disk: FloatArray, *, out: FloatArray, work: FloatArray
) -> FloatArray:
    """``weights.cpu * cpu + weights.memory * memory + weights.disk * disk`` into ``out``, left to right.

    ``work`` is a scratch array; it may be ``cpu`` (read before it is overwritten), not ``memory``
    or ``disk``.
    """
    np.multiply(cpu, weights.cpu, out=out)
    out += np.multiply(memory, weights.memory, out=work)
    out += np.multiply(disk, weights.disk, out=work)
    return out


@dataclass(frozen=True, slots=True)
class WeightedShares:
    """Every host's weighted sum of its allocated shares (``measured=False``: ``least_loaded``'s
    score) or of its measured load with the allocated disk share (``measured=True``:
    ``least_utilized``'s). Neither depends on the VM, so the fleet keeps the column
    (:meth:`FleetColumns.derived`) and a decision reads it instead of computing it again."""

    weights: Weights

    @property
    def key(self) -> Weights:
        return self.weights

    def rows(self, columns: FleetColumns) -> tuple[FloatArray, FloatArray, FloatArray]:
        used = columns.utilisation
        return used[CPU], used[MEMORY], used[DISK]

    def compute(self, columns: FleetColumns) -> FloatArray:
        cpu, memory, disk = self.rows(columns)
        return weighted_sum(self.weights, cpu, memory, disk, out=np.empty(len(columns)), work=np.empty(len(columns)))

    def row(self, columns: FleetColumns, index: int) -> float:
        # The same operations in the same order as ``weighted_sum``: the same bits.
        cpu, memory, disk = self.rows(columns)
        weights = self.weights
        return float(cpu[index] * weights.cpu + memory[index] * weights.memory + disk[index] * weights.disk)


class WeightedLoad(WeightedShares):
    """``least_utilized``'s score: the measured cpu and memory load, the allocated disk share."""

    __slots__ = ()

    def rows(self, columns: FleetColumns) -> tuple[FloatArray, FloatArray, FloatArray]:
        return columns.load[CPU], columns.load[MEMORY], columns.utilisation[DISK]


def rank_lowest(
    scores: FloatArray, eligible: BoolArray, eligible_count: int, limit: int, *, scratch: Scratch
) -> Ranking:
    """The eligible rows with the lowest scores, ascending; equal scores in row (host id) order.

    Leaves ``scores`` as it was (it may be a column the fleet keeps); works in ``scratch.floats[3]``.
    """
    penalty = np.multiply(np.logical_not(eligible, out=scratch.ineligible), INELIGIBLE_PENALTY, out=scratch.floats[3])
    masked = np.add(scores, penalty, out=penalty)
    picks: list[int] = []
    picked_scores: list[float] = []
    for _ in range(min(limit, eligible_count)):
        index = int(masked.argmin())  # the first minimum: the lowest host id among ties
        picks.append(index)
        picked_scores.append(float(masked[index]))
        masked[index] = np.inf
    return Ranking(tuple(picks), tuple(picked_scores))


class LowestScoreWins:
    """``rank`` for a strategy whose ``scores`` give every host a number, lowest preferred."""

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        raise NotImplementedError

    def rank(
        self,
        columns: FleetColumns,
        request: RequestVector,
        eligible: BoolArray,
        eligible_count: int,
        context: DecisionContext,
        limit: int,
    ) -> Ranking:
        scores = self.scores(columns, request, context)
        assert scores is not None
        return rank_lowest(scores, eligible, eligible_count, limit, scratch=columns.scratch)
