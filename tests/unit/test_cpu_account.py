"""The benchmark's CPU accounting (bench/cpu_account.py): who spent what, per VM."""

from __future__ import annotations

import os
import time

from bench.cpu_account import component_of, cores_busy, cpu_times, per_vm_ms, spent


def test_named_processes_win_over_server_names() -> None:
    named = {10: "scheduler", 11: "gateway"}
    assert component_of(10, "python", named) == "scheduler"
    assert component_of(12, "beam.smp", named) == "rabbitmq"
    assert component_of(13, "postgres", named) == "postgresql"
    assert component_of(14, "redis-server", named) == "redis"
    assert component_of(15, "bash", named) == "other"


def test_spent_is_the_difference_and_never_negative() -> None:
    before = {"rabbitmq": 10.0, "api": 2.0, "other": 5.0}
    after = {"rabbitmq": 12.5, "api": 2.0, "other": 4.0, "fleet": 1.0}  # a process of "other" exited
    assert spent(before, after) == {"rabbitmq": 2.5, "api": 0.0, "other": 0.0, "fleet": 1.0}


def test_per_vm_is_milliseconds_largest_first_with_a_total() -> None:
    rows = per_vm_ms({"api": 1.0, "rabbitmq": 3.0, "idle": 0.0}, 1000)
    assert list(rows) == ["rabbitmq", "api", "total"]
    assert rows == {"rabbitmq": 3.0, "api": 1.0, "total": 4.0}
    assert per_vm_ms({"api": 1.0}, 0) == {}


def test_cores_busy_is_seconds_over_the_window_largest_first_with_a_total() -> None:
    rows = cores_busy({"gateway": 3.0, "rabbitmq": 6.0, "api": 0.0}, 30.0)
    assert rows == {"rabbitmq": 0.2, "gateway": 0.1, "total": 0.3}
    assert list(rows) == ["rabbitmq", "gateway", "total"]
    assert cores_busy({"api": 1.0}, 0.0) == {}


def test_this_process_is_counted_under_its_name() -> None:
    before = cpu_times({os.getpid(): "me"})
    deadline = time.process_time() + 0.05  # burn more than a clock tick (10 ms) of CPU
    while time.process_time() < deadline:
        pass
    after = cpu_times({os.getpid(): "me"})
    assert spent(before, after)["me"] > 0
