"""``paused``: an operator paused scheduling on the host (maintenance); it keeps its VMs."""

from __future__ import annotations

import numpy as np

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class PausedFilter:
    NAME = "paused"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        return np.logical_not(columns.paused)

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        return "paused: scheduling paused"
