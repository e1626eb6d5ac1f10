from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import host, request
from vmsched_placement import Demand
from vmsched_placement.filters import CpuFilter


def test_cpu_passes_when_exactly_enough_vcpus_are_free() -> None:
    assert passes(CpuFilter(), host(cpu=16, used_cpu=12), request(cpu=4))


def test_cpu_passes_with_overcommit() -> None:
    # 16 x 1.5 = 24 may be handed out; 20 are.
    assert passes(CpuFilter(), host(cpu=16, used_cpu=20, cpu_ratio=1.5), request(cpu=4))


def test_cpu_overcommit_rounds_down_without_float_noise() -> None:
    # 10 x 1.1 is 11.000000000000002 in floats, 10 x 0.7 is 6.999999999999999: 11 and 7 either way.
    assert passes(CpuFilter(), host(cpu=10, used_cpu=10, cpu_ratio=1.1), request(cpu=1))
    assert not passes(CpuFilter(), host(cpu=10, used_cpu=11, cpu_ratio=1.1), request(cpu=1))
    assert passes(CpuFilter(), host(cpu=10, used_cpu=6, cpu_ratio=0.7), request(cpu=1))


def test_cpu_fails_when_too_few_vcpus_are_free() -> None:
    full = host(cpu=16, used_cpu=14)
    assert not passes(CpuFilter(), full, request(cpu=4))
    assert reason(CpuFilter(), full, request(cpu=4)) == "cpu: needs 4, 2 free (16 total, 14 allocated)"


def test_cpu_does_not_check_a_vm_that_asks_for_no_cpu() -> None:
    assert passes(CpuFilter(), host(cpu=4, used_cpu=6), request(cpu=0))


def test_cpu_counts_what_is_reserved_for_the_hypervisor_before_overcommit() -> None:
    # (16 - 2) x 1.5 = 21 may be handed out; 18 are: 3 free.
    reserved = host(cpu=16, used_cpu=18, cpu_ratio=1.5, reserved=Demand(2, 0, 0, 0))
    assert passes(CpuFilter(), reserved, request(cpu=3))
    assert not passes(CpuFilter(), reserved, request(cpu=4))
    assert reason(CpuFilter(), reserved, request(cpu=4)) == (
        "cpu: needs 4, 3 free (16 total x 1.5 overcommit, 2 reserved, 18 allocated)"
    )
