"""``excluded``: hosts that already failed this VM are not tried again (CloudStack's ExcludeList)."""

from __future__ import annotations

import numpy as np

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class ExcludedFilter:
    NAME = "excluded"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if not request.exclude_hosts:
            return None
        passes = np.ones(len(columns), dtype=np.bool_)
        for host_id in request.exclude_hosts:
            index = columns.index_of(host_id)
            if index is not None:
                passes[index] = False
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        return "excluded: excluded on retry"
