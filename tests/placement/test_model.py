from __future__ import annotations

import pytest

from tests.placement.support import host
from vmsched_contract.strategy import Strategy
from vmsched_placement import STRATEGIES, UnknownStrategyError, Weights, strategy_for


def test_weights_refuse_negative_or_non_finite_values() -> None:
    with pytest.raises(ValueError, match="cpu"):
        Weights(cpu=-0.1)
    with pytest.raises(ValueError, match="disk"):
        Weights(disk=float("nan"))


def test_strategy_for_accepts_the_setting_strings() -> None:
    assert strategy_for("best_fit") is STRATEGIES[Strategy.BEST_FIT]
    with pytest.raises(
        UnknownStrategyError,
        match="valid: best_fit, fewest_vms, first_fit, least_loaded, least_utilized, most_vms, random, "
        "round_robin, user_concentrated",
    ):
        strategy_for("worst_fit")


def test_effective_capacity_applies_ratios_to_cpu_and_memory_only() -> None:
    h = host(cpu=16, memory_mb=1000, disk_gb=100, gpu=2, cpu_ratio=1.5, memory_ratio=0.9, used_cpu=4)
    assert h.effective_capacity.as_tuple() == (24, 900, 100, 2)
    assert h.free.as_tuple() == (20, 900, 100, 2)
