from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import host, request
from vmsched_placement.filters import GpuFilter


def test_gpu_passes_when_a_gpu_is_free() -> None:
    assert passes(GpuFilter(), host(gpu=2, used_gpu=1), request(gpu=1))


def test_gpu_passes_a_vm_without_gpus_on_a_host_without_gpus() -> None:
    assert passes(GpuFilter(), host(gpu=0), request(gpu=0))


def test_gpu_fails_on_a_host_without_gpus() -> None:
    assert not passes(GpuFilter(), host(gpu=0), request(gpu=1))
    assert reason(GpuFilter(), host(gpu=0), request(gpu=1)) == "gpu: needs 1, 0 free (0 total, 0 allocated)"
