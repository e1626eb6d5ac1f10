"""``taints``: a host with a ``PreferNoSchedule`` taint the VM does not tolerate is used only when no
other eligible host is free of one (Kubernetes' TaintToleration score). ``NoSchedule`` taints are the
filter's (``filters/taints.py``); columnar the same way."""

from __future__ import annotations

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector
from vmsched_placement.taint_rules import PREFER_NO_SCHEDULE, untolerated


class PreferNoScheduleWeigher:
    NAME = "taints"

    def penalty(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if not columns.prefer_no_schedule_hosts:
            return None
        if not request.tolerations:
            return columns.prefer_no_schedule
        return columns.untolerated_mask(request.tolerations, PREFER_NO_SCHEDULE)

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        avoided = untolerated(fleet.host_at(index).taints, request.tolerations, PREFER_NO_SCHEDULE)
        return f"taints: host has {', '.join(str(taint) for taint in avoided)}, not tolerated"
