"""``disk``: enough GB of disk free, counting the host's disk overcommit ratio, after what is reserved
for the hypervisor."""

from __future__ import annotations

from vmsched_placement.filters.resources import ResourceFilter
from vmsched_placement.model import DISK


class DiskFilter(ResourceFilter):
    NAME = "disk"
    RESOURCE = DISK
