"""The end-to-end benchmark's arithmetic (bench/e2e_stats.py)."""

from __future__ import annotations

import math

import pytest

from bench.e2e_stats import hosts_lower_bound, percentile, sustained_rate, utilisation_spread


def test_percentile_interpolates_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0, 5.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 25) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert math.isnan(percentile([], 99))


def test_sustained_rate_leaves_out_ramp_up_and_drain() -> None:
    steady = [i / 1000 for i in range(1000)]  # 1,000 events/s
    slow_tail = [1.0 + i for i in range(50)]  # a straggling drain
    assert sustained_rate(steady) == pytest.approx(1000, rel=0.01)
    assert sustained_rate(steady + slow_tail[:5]) == pytest.approx(1000, rel=0.05)
    assert sustained_rate([1.0, 2.0]) == 0.0


def test_lower_bound_on_identical_hosts_is_the_tightest_resource() -> None:
    host = {"cpu": 32, "memory_mb": 131072, "disk_gb": 1000, "gpu": 0}
    vms = [{"cpu": 4, "memory_mb": 4096, "disk_gb": 10, "gpu": 0}] * 20  # 80 cpu: 3 hosts by cpu
    assert hosts_lower_bound(vms, [host] * 10) == 3
    memory_heavy = [{"cpu": 1, "memory_mb": 65536, "disk_gb": 10}] * 5  # 2.5 hosts of memory
    assert hosts_lower_bound(memory_heavy, [host] * 10) == 3


def test_lower_bound_on_mixed_hosts_counts_the_largest_first() -> None:
    hosts = [{"cpu": 16}, {"cpu": 64}, {"cpu": 32}]
    assert hosts_lower_bound([{"cpu": 60}], hosts) == 1
    assert hosts_lower_bound([{"cpu": 65}], hosts) == 2
    assert hosts_lower_bound([], hosts) == 0
    with pytest.raises(ValueError, match="exceeds"):
        hosts_lower_bound([{"cpu": 200}], hosts)


def test_utilisation_spread() -> None:
    spread = utilisation_spread([8, 16, 24], [32, 32, 32])
    assert spread["mean"] == pytest.approx(0.5)
    assert spread["min"] == 0.25
    assert spread["max"] == 0.75
    assert spread["stdev"] == pytest.approx(math.sqrt(1 / 24))
