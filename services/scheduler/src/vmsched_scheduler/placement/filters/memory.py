"""``memory``: enough MiB free, counting the host's memory overcommit ratio."""

from __future__ import annotations

from vmsched_scheduler.placement.filters.resources import ResourceFilter
from vmsched_scheduler.placement.fleet import Fleet
from vmsched_scheduler.placement.model import MEMORY, RequestVector


class MemoryFilter(ResourceFilter):
    NAME = "memory"
    RESOURCE = MEMORY

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        return (
            f"memory: needs {request.memory_mb} MiB, {self.free(fleet, index)} MiB free "
            f"({host.capacity.memory_mb} MiB x {float(host.memory_ratio)} overcommit, "
            f"{host.allocated.memory_mb} MiB allocated)"
        )
