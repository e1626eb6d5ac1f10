"""What a run does: the fleet sizes, phases and rates (BENCH_* variables), the services' settings
for the harness, and what issue 12 asks of the core."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BASE_AMQP = os.environ.get("VMSCHED_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
BASE_REDIS = os.environ.get("VMSCHED_REDIS_URL", "redis://127.0.0.1:6379/0")
BASE_DB = os.environ.get("VMSCHED_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/vmsched")
HEARTBEAT_INTERVAL = 30.0
SCHEDULERS = 2
LATENCY_RATE = 100.0
WARM_UP_SECONDS = 3.0
SATURATED = 0.8  # achieved below this share of offered: the sweep stops
# A throughput VM is small: the fleets are overcommitted (cpu x4) so that every run fits in them.
SMALL_VM = {"cpu": 1, "memory_mb": 512, "disk_gb": 1}
THROUGHPUT_OVERCOMMIT_CPU = 4.0
IDLE_SECONDS = 30.0  # one heartbeat period: every host beats once in the window
STALL_TIMEOUT = 30.0  # no command received for this long: the rest is lost, not late
DRAIN_LIMIT = 900.0

# What issue 12 asks of the core, per fleet size where it depends on it.
THROUGHPUT_TARGETS = {1000: 1500.0, 10000: 1200.0}
SCHEDULER_CPU_MS_TARGET = 1.5
MESSAGES_PER_VM_TARGET = 2.0
P99_TO_SCHEDULED_MS_TARGET = 100.0


@dataclass(frozen=True)
class Plan:
    hosts: list[int]
    runs: int
    latency_seconds: float
    sweep_rates: list[float]
    step_seconds: float
    saturation_vms: int
    fill_hosts: int
    pack_hosts: int


def plan_from_env() -> Plan:
    quick = os.environ.get("BENCH_QUICK") == "1"
    hosts = [int(h) for h in os.environ.get("BENCH_HOSTS", "1000,10000").split(",") if h]
    runs = int(os.environ.get("BENCH_RUNS", "1" if quick else "3"))
    return Plan(
        hosts=hosts,
        runs=runs,
        latency_seconds=5.0 if quick else 10.0,
        sweep_rates=[500.0, 1000.0, 2000.0] if quick else [500.0, 1000.0, 1500.0, 2000.0],
        step_seconds=3.0 if quick else 5.0,
        saturation_vms=6000 if quick else 12000,
        fill_hosts=int(os.environ.get("BENCH_FILL_HOSTS", "1000")),
        pack_hosts=int(os.environ.get("BENCH_PACK_HOSTS", "100")),
    )
