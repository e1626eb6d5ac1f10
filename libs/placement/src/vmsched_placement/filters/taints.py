"""``taints``: a host with a ``NoSchedule`` taint takes only VMs that tolerate it (Kubernetes'
TaintToleration filter). ``PreferNoSchedule`` taints never reject: see ``weighers/taints.py``.

Columnar: most hosts have no taints. A fleet without NoSchedule taints costs nothing; a VM without
tolerations reads the fleet's per-host flag; a VM with tolerations is judged once per distinct set
of taints in the fleet (a handful), and the verdicts are spread to the hosts by their set's code.
"""

from __future__ import annotations

import numpy as np

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector
from vmsched_placement.taint_rules import NO_SCHEDULE, untolerated


class TaintsFilter:
    NAME = "taints"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if not columns.no_schedule_hosts:
            return None
        if not request.tolerations:
            passes: BoolArray = np.logical_not(columns.no_schedule)
            return passes
        passes = np.logical_not(columns.untolerated_mask(request.tolerations, NO_SCHEDULE))
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        refused = untolerated(fleet.host_at(index).taints, request.tolerations, NO_SCHEDULE)
        return f"taints: host has {', '.join(str(taint) for taint in refused)}, not tolerated"
