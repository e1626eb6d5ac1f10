from __future__ import annotations

from tests.placement.support import context, fleet_of, host, request
from vmsched_contract.strategy import Strategy
from vmsched_domain.usage import MeasuredUsage
from vmsched_placement import Weights, decide

LEAST_UTILIZED = Strategy.LEAST_UTILIZED
ONLY_CPU = Weights(cpu=1.0, memory=0.0, disk=0.0)


def test_least_utilized_prefers_the_host_that_measures_least_busy_over_the_least_allocated() -> None:
    # hv-01 has handed out three quarters of its cpu, but its VMs are idle; hv-02 half, and busy.
    idle = host("hv-01", used_cpu=12, used_memory_mb=24576, usage=MeasuredUsage(2.0, 4096.0, 12, 24576))
    busy = host("hv-02", used_cpu=8, used_memory_mb=16384, usage=MeasuredUsage(14.0, 30000.0, 8, 16384))
    fleet = fleet_of(idle, busy)
    assert decide(fleet, request(strategy=LEAST_UTILIZED), context()).host_id == "hv-01"
    assert decide(fleet, request(strategy=Strategy.LEAST_LOADED), context()).host_id == "hv-02"


def test_least_utilized_scores_measured_shares_of_the_physical_host_and_allocated_disk() -> None:
    # 4 of 16 cores busy, 8192 of 32768 MiB in use, 100 of 500 GB allocated (disk is not measured).
    measured = host("hv-01", used_cpu=10, used_disk_gb=100, usage=MeasuredUsage(4.0, 8192.0, 10, 0))
    decision = decide(fleet_of(measured), request(strategy=LEAST_UTILIZED), context())
    assert decision.score == 0.4 * 0.25 + 0.4 * 0.25 + 0.2 * 0.2


def test_least_utilized_falls_back_to_allocation_for_a_host_that_reports_no_usage() -> None:
    unmeasured = host("hv-01", used_cpu=4)  # 25 % allocated, no measurement
    measured = host("hv-02", used_cpu=1, usage=MeasuredUsage(8.0, 0.0, 1, 0))  # 50 % measured
    decision = decide(fleet_of(unmeasured, measured), request(strategy=LEAST_UTILIZED), context(weights=ONLY_CPU))
    assert decision.ranked == ("hv-01", "hv-02")
    assert decision.scores == (0.25, 0.5)


def test_least_utilized_counts_what_was_allocated_since_the_measurement() -> None:
    # Both measured 2 cores busy with 4 allocated; since then 6 more went to hv-01.
    since = host("hv-01", used_cpu=10, usage=MeasuredUsage(2.0, 0.0, 4, 0))
    still = host("hv-02", used_cpu=4, usage=MeasuredUsage(2.0, 0.0, 4, 0))
    decision = decide(fleet_of(since, still), request(strategy=LEAST_UTILIZED), context(weights=ONLY_CPU))
    assert decision.ranked == ("hv-02", "hv-01")
    assert decision.scores == (2.0 / 16, 8.0 / 16)


def test_least_utilized_does_not_subtract_what_was_released_since_the_measurement() -> None:
    released = host("hv-01", used_cpu=0, usage=MeasuredUsage(6.0, 0.0, 8, 0))
    decision = decide(fleet_of(released), request(strategy=LEAST_UTILIZED), context(weights=ONLY_CPU))
    assert decision.score == 6.0 / 16


def test_a_round_of_least_utilized_vms_spreads_beyond_the_host_that_looked_idle() -> None:
    """A round books each VM on its fleet before deciding the next: the idle host fills up in the
    estimate and the next VMs go elsewhere, rather than all to it until its next heartbeat."""
    idle = host("hv-01", usage=MeasuredUsage(0.0, 0.0, 0, 0))
    quiet = host("hv-02", usage=MeasuredUsage(4.0, 0.0, 0, 0))
    fleet = fleet_of(idle, quiet)
    vm = request(strategy=LEAST_UTILIZED, cpu=2)
    chosen = []
    for _ in range(4):
        host_id = decide(fleet, vm, context(weights=ONLY_CPU)).host_id
        assert host_id is not None
        fleet.allocate(host_id, vm.demand)
        chosen.append(host_id)
    # hv-01: 0, 2, 4 (tie with hv-02 at 4 goes to the lower id), then 6 > 4: hv-02.
    assert chosen == ["hv-01", "hv-01", "hv-01", "hv-02"]


def test_least_utilized_follows_the_weights() -> None:
    cpu_busy = host("hv-01", usage=MeasuredUsage(12.0, 0.0, 0, 0))
    memory_busy = host("hv-02", usage=MeasuredUsage(0.0, 24576.0, 0, 0))
    fleet = fleet_of(cpu_busy, memory_busy)
    only_memory = Weights(cpu=0.0, memory=1.0, disk=0.0)
    assert decide(fleet, request(strategy=LEAST_UTILIZED), context(weights=ONLY_CPU)).host_id == "hv-02"
    assert decide(fleet, request(strategy=LEAST_UTILIZED), context(weights=only_memory)).host_id == "hv-01"


def test_least_utilized_breaks_ties_by_lowest_host_id() -> None:
    same = MeasuredUsage(3.0, 1024.0, 0, 0)
    fleet = fleet_of(
        host("hv-03", usage=same), host("hv-01", usage=MeasuredUsage(5.0, 1024.0)), host("hv-02", usage=same)
    )
    assert decide(fleet, request(strategy=LEAST_UTILIZED), context()).ranked == ("hv-02", "hv-03", "hv-01")
