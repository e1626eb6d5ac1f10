"""``user_concentrated`` (CloudStack's UserConcentratedPodAllocator): the pod where the VM's project
already runs the most VMs, then the first host of that pod in id order.

Score = minus the project's VMs in the host's pod (the hosts' ``pod`` label; a host without one is in
no pod, and counts 0); ties go to the lowest host id, so within the preferred pod hosts fill in id
order, as CloudStack hands the chosen pod to its first-fit host allocator. The counts are the
request's (:attr:`~vmsched_placement.model.PlacementRequest.project_pods`): the scheduler reads them
for the round and books its own choices, as it does a server group's members.
"""

from __future__ import annotations

import numpy as np

from vmsched_contract.hierarchy import POD_LABEL
from vmsched_contract.strategy import Strategy
from vmsched_placement.fleet import FleetColumns, FloatArray
from vmsched_placement.model import DecisionContext, RequestVector
from vmsched_placement.strategies.scoring import LowestScoreWins


class UserConcentrated(LowestScoreWins):
    NAME = Strategy.USER_CONCENTRATED
    READS_MEASURED_USAGE = False

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        out = columns.scratch.floats[0]
        if not any(request.project_pods.values()):
            out.fill(0.0)
            return out
        codes, values = columns.label_column(POD_LABEL)
        # One slot per pod value, and a last one (always 0) that NO_LABEL (-1) gathers.
        table = np.zeros(len(values) + 1, dtype=np.float64)
        for pod, vms in request.project_pods.items():
            code = values.get(pod)
            if code is not None:
                table[code] = -float(vms)
        np.take(table, codes, out=out)
        return out
