from __future__ import annotations

from tests.placement.support import host
from tests.placement.weigher_checks import penalised
from vmsched_placement import Demand
from vmsched_placement.weighers import GpuAffinityWeigher


def test_gpu_affinity_penalises_gpu_hosts_for_a_vm_that_asks_for_none() -> None:
    hosts = (host("hv-01", gpu=2), host("hv-02"))
    assert penalised(GpuAffinityWeigher(), *hosts) == [True, False]
    assert penalised(GpuAffinityWeigher(), *hosts, gpu=1) is None


def test_gpu_affinity_has_no_opinion_on_a_fleet_without_gpus_to_give() -> None:
    assert penalised(GpuAffinityWeigher(), host("hv-01"), host("hv-02", gpu=1, reserved=Demand(0, 0, 0, 1))) is None
