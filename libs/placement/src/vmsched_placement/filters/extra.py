"""``extra``: enough of every named extra resource the VM asks for (``{"fpga": 1}``, seed 002's open
resource map), counted as GPUs are: whole units, never overcommitted (``vmsched_domain.fit.extra_shortfall``).

The fleet keeps a free column per name only once a VM asks for that name, so a request without
extras costs nothing and one with extras one comparison per name.
"""

from __future__ import annotations

import numpy as np

from vmsched_domain.fit import EXTRA, extra_shortfall
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class ExtraFilter:
    NAME = EXTRA

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if not request.extra:
            return None
        (name, needed), *rest = request.extra
        passes: BoolArray = np.greater_equal(columns.extra_free(name), needed)
        for name, needed in rest:
            np.logical_and(passes, np.greater_equal(columns.extra_free(name), needed), out=passes)
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        missing = extra_shortfall(dict(request.extra), dict(host.capacity.extra), dict(host.allocated.extra))
        assert missing is not None, f"{self.NAME}: {host.id} fits; only rejected hosts are explained"
        return missing.reason
