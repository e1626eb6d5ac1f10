"""``disk``: enough GB of disk free (never overcommitted)."""

from __future__ import annotations

from vmsched_scheduler.placement.filters.resources import ResourceFilter
from vmsched_scheduler.placement.fleet import Fleet
from vmsched_scheduler.placement.model import DISK, RequestVector


class DiskFilter(ResourceFilter):
    NAME = "disk"
    RESOURCE = DISK

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        return (
            f"disk: needs {request.disk_gb} GB, {self.free(fleet, index)} GB free "
            f"({host.capacity.disk_gb} GB, {host.allocated.disk_gb} GB allocated)"
        )
