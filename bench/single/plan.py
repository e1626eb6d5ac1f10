"""What a run sends and what issue 24 asks of it (this 2-core machine)."""

from __future__ import annotations

import json

VM = {"cpu": 1, "memory_mb": 64, "disk_gb": 0}
OVERCOMMIT_CPU = 64.0  # 2,048 such VMs a 32-vCPU host: every run fits in 200 hosts
HOP_MESSAGES = 20_000
HOP_WINDOW = 256
CLIENTS = 32
BATCH = 500
BATCH_VMS = 6_000

# Issue 24's targets (this 2-core machine).
TARGETS = {
    "lone_p50_ms": 5.0,
    "lone_p99_ms": 15.0,
    "clients32_per_s": 1000.0,
    "clients32_hop_ratio": 0.2,
    "open100_p99_ms": 100.0,
    "open300_p99_ms": 250.0,
    "batch_ceiling_ratio": 0.75,
    "batch_cpu_ms": 1.5,
    "singles_cpu_ms": 2.5,
}


def body(n: int) -> bytes:
    return json.dumps({"name": f"s{n}", **VM}).encode()
