"""``least_utilized``: the host with the lowest weighted *measured* load, to spread real work.

Score = w_cpu x cpu in use + w_memory x memory in use + w_disk x disk share, the weights of
``least_loaded``. cpu and memory in use are what the host's agent last measured plus what was
allocated on the host since (:meth:`MeasuredUsage.in_use`), as shares of its physical capacity; disk is
not measured, so it is the allocated share, as in ``least_loaded``. A host whose agent reports no
usage is ranked by its allocated shares, exactly as ``least_loaded`` ranks it.
"""

from __future__ import annotations

from vmsched_contract.strategy import Strategy
from vmsched_placement.fleet import FleetColumns, FloatArray
from vmsched_placement.model import DecisionContext, RequestVector
from vmsched_placement.strategies.scoring import LowestScoreWins, WeightedLoad


class LeastUtilized(LowestScoreWins):
    NAME = Strategy.LEAST_UTILIZED
    READS_MEASURED_USAGE = True

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        return columns.derived(WeightedLoad(context.weights))
