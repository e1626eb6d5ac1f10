"""``gpu_affinity``: a VM that asks for no GPU goes to a host without GPUs while one is eligible, so
GPU hosts stay free for the VMs that need them (seed 001's GPU affinity). A host counts as a GPU host
when it has GPUs to give VMs (after what is reserved for the hypervisor)."""

from __future__ import annotations

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class GpuAffinityWeigher:
    NAME = "gpu_affinity"

    def penalty(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if request.gpu > 0 or not columns.gpu_hosts:
            return None
        return columns.has_gpus

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        gpus = fleet.host_at(index).effective_capacity.gpu
        return f"gpu_affinity: host has {gpus} GPU{'s' if gpus != 1 else ''}, the VM asks for none"
