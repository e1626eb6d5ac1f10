"""``memory``: enough MiB of memory free, counting the host's memory overcommit ratio, after what is
reserved for the hypervisor."""

from __future__ import annotations

from vmsched_placement.filters.resources import ResourceFilter
from vmsched_placement.model import MEMORY


class MemoryFilter(ResourceFilter):
    NAME = "memory"
    RESOURCE = MEMORY
