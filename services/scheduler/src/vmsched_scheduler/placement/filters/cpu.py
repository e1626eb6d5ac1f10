"""``cpu``: enough vCPUs free, counting the host's cpu overcommit ratio."""

from __future__ import annotations

from vmsched_scheduler.placement.filters.resources import ResourceFilter
from vmsched_scheduler.placement.fleet import Fleet
from vmsched_scheduler.placement.model import CPU, RequestVector


class CpuFilter(ResourceFilter):
    NAME = "cpu"
    RESOURCE = CPU

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        return (
            f"cpu: needs {request.cpu}, {self.free(fleet, index)} free "
            f"({host.capacity.cpu} x {float(host.cpu_ratio)} overcommit, {host.allocated.cpu} allocated)"
        )
