"""``gpu``: enough whole GPUs free (never overcommitted), after what is reserved for the hypervisor."""

from __future__ import annotations

from vmsched_placement.filters.resources import ResourceFilter
from vmsched_placement.model import GPU


class GpuFilter(ResourceFilter):
    NAME = "gpu"
    RESOURCE = GPU
