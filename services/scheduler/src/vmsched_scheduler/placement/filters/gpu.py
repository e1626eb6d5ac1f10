"""``gpu``: enough whole GPUs free (never overcommitted)."""

from __future__ import annotations

from vmsched_scheduler.placement.filters.resources import ResourceFilter
from vmsched_scheduler.placement.fleet import Fleet
from vmsched_scheduler.placement.model import GPU, RequestVector


class GpuFilter(ResourceFilter):
    NAME = "gpu"
    RESOURCE = GPU

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        return (
            f"gpu: needs {request.gpu}, {self.free(fleet, index)} free "
            f"({host.capacity.gpu} total, {host.allocated.gpu} allocated)"
        )
