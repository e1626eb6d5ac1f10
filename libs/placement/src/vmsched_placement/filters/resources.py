"""The shared rule of the ``cpu``, ``memory``, ``disk`` and ``gpu`` filters: the fit rule, one resource.

The rule itself (``vmsched_domain.fit``) says: ``allocated + requested <= floor((capacity - reserved)
x ratio + 1e-9)``, checked only for a resource the VM asks for, so a host over capacity on GPUs
still takes a VM without GPUs. The fleet keeps ``free = allocatable - allocated`` per resource as a
column, so the mask is one comparison; the reason is the rule's own :class:`~vmsched_domain.fit.Shortfall`.
"""

from __future__ import annotations

import numpy as np

from vmsched_domain.fit import RESOURCES, shortfall
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class ResourceFilter:
    NAME = "resource"
    RESOURCE = 0  # row of the fleet's resource columns, an index into the fit rule's RESOURCES

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        needed = request.demanded(self.RESOURCE)
        if needed <= 0:
            return None
        passes: BoolArray = np.greater_equal(columns.free[self.RESOURCE], needed)
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        missing = shortfall(
            RESOURCES[self.RESOURCE], request, host.capacity, host.reserved, host.ratios, host.allocated
        )
        assert missing is not None, f"{self.NAME}: {host.id} fits; only rejected hosts are explained"
        return missing.reason
