"""The shared rule of the ``cpu``, ``memory``, ``disk`` and ``gpu`` filters: enough of one resource free.

``free = floor(capacity x ratio + 1e-9) - allocated`` (the ratio only for cpu and memory) must be at
least the VM's demand. A VM that asks for none of a resource is not checked for it (Kubernetes'
``fitsRequest``), so a host over capacity on GPUs can still take a VM without GPUs.
Each resource module overrides ``reason`` only, to name its numbers in its own units.
"""

from __future__ import annotations

import numpy as np

from vmsched_scheduler.placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_scheduler.placement.model import RequestVector


class ResourceFilter:
    NAME = "resource"
    RESOURCE = 0  # row of the fleet's resource columns

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        needed = request.demanded(self.RESOURCE)
        if needed <= 0:
            return None
        passes: BoolArray = np.greater_equal(columns.free[self.RESOURCE], needed)
        return passes

    def free(self, fleet: Fleet, index: int) -> int:
        return int(fleet.columns.free[self.RESOURCE, index])

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        return f"{self.NAME}: needs {request.demanded(self.RESOURCE)}, {self.free(fleet, index)} free"
