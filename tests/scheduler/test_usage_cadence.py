"""The usage cadence: a host's measured usage changes at most once per interval in the scheduler's
copy; everything else about a re-read host is taken at once. Pure, no servers."""

from __future__ import annotations

from dataclasses import replace

from tests.placement.support import host
from vmsched_domain.usage import MeasuredUsage
from vmsched_scheduler.usage_cadence import UsageCadence


def measured(cpu: float) -> MeasuredUsage:
    return MeasuredUsage(cpu_used=cpu, memory_used_mb=1024.0, allocated_cpu=0, allocated_memory_mb=0)


def test_a_reread_host_keeps_its_usage_until_the_interval_has_passed_since_it_was_taken() -> None:
    cadence = UsageCadence(30.0)
    first = replace(host("hv-1"), usage=measured(1.0))
    assert cadence.keep(first, now=100.0) is first
    busier = replace(first, usage=measured(9.0), vm_count=3)
    kept = cadence.keep(busier, now=129.9)
    assert kept.usage == measured(1.0)
    assert kept.vm_count == 3  # the rest of the read is taken at once
    assert cadence.keep(replace(first, usage=measured(12.0)), now=130.0).usage == measured(12.0)
    # The next renewal counts from when the new usage was taken.
    assert cadence.keep(replace(first, usage=measured(2.0)), now=159.0).usage == measured(12.0)
    assert cadence.keep(replace(first, usage=measured(2.0)), now=160.0).usage == measured(2.0)


def test_a_host_without_usage_held_takes_the_first_measurement_at_once() -> None:
    cadence = UsageCadence(30.0)
    blind = host("hv-1")
    assert blind.usage is None
    assert cadence.keep(blind, now=0.0) is blind
    first = replace(blind, usage=measured(4.0))
    assert cadence.keep(first, now=1.0).usage == measured(4.0)
    assert cadence.keep(replace(blind, usage=measured(8.0)), now=2.0).usage == measured(4.0)


def test_a_host_forgotten_or_left_out_of_a_full_read_starts_over() -> None:
    cadence = UsageCadence(30.0)
    for host_id in ("hv-1", "hv-2"):
        cadence.keep(replace(host(host_id), usage=measured(1.0)), now=0.0)
    cadence.forget("hv-1")
    cadence.retain(["hv-1"])  # hv-2 gone from the fleet
    for host_id in ("hv-1", "hv-2"):
        assert cadence.keep(replace(host(host_id), usage=measured(5.0)), now=1.0).usage == measured(5.0)


def test_interval_zero_takes_every_reads_usage() -> None:
    cadence = UsageCadence(0.0)
    cadence.keep(replace(host("hv-1"), usage=measured(1.0)), now=0.0)
    assert cadence.keep(replace(host("hv-1"), usage=measured(3.0)), now=0.0).usage == measured(3.0)
