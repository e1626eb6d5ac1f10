from __future__ import annotations

import math
import random

from tests.placement.support import context, fleet_of, host, request
from vmsched_contract.strategy import Strategy
from vmsched_placement import Demand, Weights, decide

BEST_FIT = Strategy.BEST_FIT


def test_best_fit_prefers_the_fullest_host_that_fits() -> None:
    fleet = fleet_of(
        host("hv-01", used_cpu=4, used_memory_mb=8192),
        host("hv-02", used_cpu=12, used_memory_mb=24576),
        host("hv-03", used_cpu=15, used_memory_mb=31744),  # too full for 2 vCPUs
    )
    decision = decide(fleet, request(cpu=2, memory_mb=4096, strategy=BEST_FIT), context())
    assert decision.host_id == "hv-02"
    assert decision.ranked == ("hv-02", "hv-01")
    assert decision.rejections == {"cpu": 1}


def test_best_fit_counts_the_vm_it_places() -> None:
    # hv-01 is fuller now, but the VM leaves hv-02 with less room in share terms.
    fleet = fleet_of(host("hv-01", cpu=16, used_cpu=8), host("hv-02", cpu=4, used_cpu=0))
    only_cpu = context(weights=Weights(cpu=1.0, memory=0.0, disk=0.0))
    assert decide(fleet, request(cpu=4, strategy=BEST_FIT), only_cpu).host_id == "hv-02"


def test_best_fit_breaks_ties_by_lowest_host_id() -> None:
    fleet = fleet_of(host("hv-02", used_cpu=8), host("hv-01", used_cpu=8), host("hv-03", used_cpu=2))
    assert decide(fleet, request(strategy=BEST_FIT), context()).ranked == ("hv-01", "hv-02", "hv-03")


def test_best_fit_packs_a_mixed_workload_onto_few_hosts() -> None:
    rng = random.Random(7)
    sizes = [rng.choice([1, 1, 2, 2, 4, 8]) for _ in range(120)]
    hosts = [host(f"hv-{n:02d}", cpu=16, memory_mb=65536, disk_gb=1000) for n in range(40)]

    def hosts_used(strategy: Strategy) -> int:
        fleet = fleet_of(*hosts)
        for cpu in sizes:
            demand = Demand(cpu, 4096 * cpu, 10)
            decision = decide(fleet, request(cpu=cpu, memory_mb=4096 * cpu, disk_gb=10, strategy=strategy), context())
            assert decision.host_id is not None
            fleet.allocate(decision.host_id, demand)
        return sum(1 for h in fleet if h.vm_count > 0)

    lower_bound = math.ceil(sum(sizes) / 16)
    assert hosts_used(BEST_FIT) <= lower_bound + 1
    assert hosts_used(Strategy.LEAST_LOADED) == len(hosts)  # the opposite goal, for contrast
