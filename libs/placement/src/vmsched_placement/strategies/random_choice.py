"""``random``: a uniform pick among eligible hosts, drawn from the ``random.Random`` handed in.

Fallbacks are further distinct uniform draws. The same seed, fleet and request give the same host.
"""

from __future__ import annotations

import numpy as np

from vmsched_contract.strategy import Strategy
from vmsched_placement.fleet import BoolArray, FleetColumns, FloatArray
from vmsched_placement.model import DecisionContext, RequestVector
from vmsched_placement.strategies.base import Ranking


class RandomChoice:
    NAME = Strategy.RANDOM
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
        picks = context.rng.sample(range(eligible_count), min(limit, eligible_count))
        return Ranking(tuple(int(rows[pick]) for pick in picks), None)
