from __future__ import annotations

from tests.placement.support import context, fleet_of, host, request
from vmsched_contract.strategy import Strategy
from vmsched_placement import Weights, decide

LEAST_LOADED = Strategy.LEAST_LOADED


def test_least_loaded_prefers_the_emptiest_host() -> None:
    fleet = fleet_of(
        host("hv-01", used_cpu=12, used_memory_mb=24576, used_disk_gb=100),
        host("hv-02", used_cpu=4, used_memory_mb=8192, used_disk_gb=100),
        host("hv-03", used_cpu=8, used_memory_mb=16384, used_disk_gb=100),
    )
    decision = decide(fleet, request(strategy=LEAST_LOADED), context())
    assert decision.host_id == "hv-02"
    assert decision.ranked == ("hv-02", "hv-03", "hv-01")
    # 0.4 x 4/16 + 0.4 x 8192/32768 + 0.2 x 100/500
    assert decision.score == 0.4 * 0.25 + 0.4 * 0.25 + 0.2 * 0.2


def test_least_loaded_compares_shares_not_absolute_amounts() -> None:
    big = host("hv-01", cpu=64, memory_mb=262144, used_cpu=16, used_memory_mb=65536)  # 25 % used
    small = host("hv-02", cpu=8, memory_mb=16384, used_cpu=1, used_memory_mb=2048)  # 12.5 % used
    assert decide(fleet_of(big, small), request(strategy=LEAST_LOADED), context()).host_id == "hv-02"


def test_least_loaded_follows_the_weights() -> None:
    cpu_busy = host("hv-01", used_cpu=12)
    memory_busy = host("hv-02", used_memory_mb=24576)
    only_cpu = Weights(cpu=1.0, memory=0.0, disk=0.0)
    only_memory = Weights(cpu=0.0, memory=1.0, disk=0.0)
    fleet = fleet_of(cpu_busy, memory_busy)
    assert decide(fleet, request(strategy=LEAST_LOADED), context(weights=only_cpu)).host_id == "hv-02"
    assert decide(fleet, request(strategy=LEAST_LOADED), context(weights=only_memory)).host_id == "hv-01"


def test_least_loaded_breaks_ties_by_lowest_host_id() -> None:
    fleet = fleet_of(host("hv-03", used_cpu=2), host("hv-01", used_cpu=4), host("hv-02", used_cpu=2))
    assert decide(fleet, request(strategy=LEAST_LOADED), context()).ranked == ("hv-02", "hv-03", "hv-01")


def test_least_loaded_counts_overcommit_in_the_share() -> None:
    # 16 used of 16 x 2.0 = 32 is 50 %; 10 used of 16 is 62.5 %.
    overcommitted = host("hv-01", used_cpu=16, cpu_ratio=2.0)
    plain = host("hv-02", used_cpu=10)
    only_cpu = Weights(cpu=1.0, memory=0.0, disk=0.0)
    assert decide(fleet_of(overcommitted, plain), request(), context(weights=only_cpu)).host_id == "hv-01"
