"""``first_fit`` (CloudStack's FirstFitAllocator): the first host in id order that fits.

Unscored: eligible hosts in id order, the first chosen, the next ones its fallbacks. It fills the
lowest ids first, and its choice never depends on load, so an operator reads where the next VM goes
from the host list alone.
"""

from __future__ import annotations

import numpy as np

from vmsched_contract.strategy import Strategy
from vmsched_placement.fleet import BoolArray, FleetColumns, FloatArray
from vmsched_placement.model import DecisionContext, RequestVector
from vmsched_placement.strategies.base import Ranking


class FirstFit:
    NAME = Strategy.FIRST_FIT
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
        rows = np.flatnonzero(eligible)[:limit]
        return Ranking(tuple(int(row) for row in rows.tolist()), None)
