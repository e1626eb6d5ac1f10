"""``labels``: the host carries every ``key=value`` label the VM asks for (Orchard's label matching).

The fleet interns each label key's values into an integer column, so a labelled request costs one
comparison (and one AND) per pair; a request without labels costs nothing.
"""

from __future__ import annotations

import numpy as np

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class LabelsFilter:
    NAME = "labels"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if not request.labels:
            return None
        (key, value), *rest = request.labels
        passes = columns.label_mask(key, value)
        if rest:
            for key, value in rest:
                np.logical_and(passes, columns.label_mask(key, value), out=passes)
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        labels = fleet.host_at(index).labels
        missing = []
        for key, value in request.labels:
            if key not in labels:
                missing.append(f"{key}={value}")
            elif labels[key] != value:
                missing.append(f"{key}={value} (host has {key}={labels[key]})")
        return "labels: missing " + ", ".join(missing)
