"""``best_fit`` (bin packing): the host left with the least capacity once the VM is placed.

Score = w_cpu x cpu left + w_memory x memory left + w_disk x disk left, each being
(free - demand) / effective capacity after placing. The fullest host that still fits wins, which
keeps VMs packed on few hosts and leaves others empty for large VMs.
"""

from __future__ import annotations

import numpy as np

from vmsched_contract.strategy import Strategy
from vmsched_placement.fleet import FleetColumns, FloatArray
from vmsched_placement.model import CPU, DISK, MEMORY, DecisionContext, RequestVector
from vmsched_placement.strategies.scoring import LowestScoreWins, weighted_sum


class BestFit(LowestScoreWins):
    NAME = Strategy.BEST_FIT
    READS_MEASURED_USAGE = False

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        free, divisor, floats = columns.free, columns.divisor, columns.scratch.floats
        left = []
        for resource, share in zip((CPU, MEMORY, DISK), floats[:3], strict=True):
            np.subtract(free[resource], float(request.demanded(resource)), out=share)
            left.append(np.divide(share, divisor[resource], out=share))
        # Summed into the cpu share's array, which is read first.
        return weighted_sum(context.weights, *left, out=floats[0], work=floats[3])
