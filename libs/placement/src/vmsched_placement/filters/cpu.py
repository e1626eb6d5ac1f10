"""``cpu``: enough vCPUs free, counting the host's cpu overcommit ratio, after what is reserved for the hypervisor."""

from __future__ import annotations

from vmsched_placement.filters.resources import ResourceFilter
from vmsched_placement.model import CPU


class CpuFilter(ResourceFilter):
    NAME = "cpu"
    RESOURCE = CPU
