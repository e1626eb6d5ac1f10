"""``least_loaded`` (default): the host with the lowest weighted utilisation, to spread load.

Score = w_cpu x cpu share + w_memory x memory share + w_disk x disk share, each share being
allocated / effective capacity *before* the VM is placed (the seed's "current utilisation" of an
agent; it does not depend on the VM, so a decision ranks hosts by how busy they are now).
"""

from __future__ import annotations

from vmsched_contract.strategy import Strategy
from vmsched_placement.fleet import FleetColumns, FloatArray
from vmsched_placement.model import DecisionContext, RequestVector
from vmsched_placement.strategies.scoring import LowestScoreWins, WeightedShares


class LeastLoaded(LowestScoreWins):
    NAME = Strategy.LEAST_LOADED
    READS_MEASURED_USAGE = False

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        return columns.derived(WeightedShares(context.weights))
