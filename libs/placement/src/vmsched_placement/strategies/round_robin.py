"""``round_robin``: eligible hosts in host id order, one after another, shared by every scheduler.

The cursor is a counter shared by all scheduler replicas (Redis INCR) and handed in per decision:
``eligible[cursor % len(eligible)]``. While the eligible set stays the same, consecutive cursor
values visit every eligible host once per cycle, however replicas interleave their values.
Fallbacks are the next hosts of the cycle.
"""

from __future__ import annotations

import numpy as np

from vmsched_contract.strategy import Strategy
from vmsched_placement.fleet import BoolArray, FleetColumns, FloatArray
from vmsched_placement.model import DecisionContext, RequestVector
from vmsched_placement.strategies.base import Ranking


class RoundRobin:
    NAME = Strategy.ROUND_ROBIN
    READS_MEASURED_USAGE = False

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        return None

    def rank(
        self,
        columns: FleetColumns,
        request: RequestVector,
        eligible: BoolArray,
        eligible_count: int,
        context: DecisionContext,
        limit: int,
    ) -> Ranking:
        rows = np.flatnonzero(eligible)
        start = context.round_robin_cursor % eligible_count
        steps = range(min(limit, eligible_count))
        return Ranking(tuple(int(rows[(start + step) % eligible_count]) for step in steps), None)
