"""What the figures were measured on: this machine's speed, RabbitMQ's file limit, the commit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from typing import Any

from bench.e2e.plan import ROOT


def python_loop_seconds() -> float:
    """This machine's speed as one number: seconds for 20 million additions in a Python loop, the
    median of three. Figures from machines (or hours) whose loop differs are not comparable: the
    same loop took 1.26 s here on a quiet moment and 2.8 to 3.5 s just after a benchmark run."""
    timings = []
    for _ in range(3):
        began, total = time.perf_counter(), 0
        for number in range(20_000_000):
            total += number
        timings.append(time.perf_counter() - began)
    return round(sorted(timings)[1], 2)


def machine() -> dict[str, Any]:
    return {
        "python_loop_s": python_loop_seconds(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version,
        "load_average_at_start": os.getloadavg(),
        "rabbitmq_file_descriptor_limit": rabbitmq_fd_limit(),
    }


def rabbitmq_fd_limit() -> int | None:
    """The node's open-file limit: each agent queue needs file handles, and a node at 1,024 stalls
    with thousands of them (docs/performance.md, "Before you run it")."""
    try:
        status = subprocess.run(["rabbitmqctl", "status"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = status.splitlines()
    for index, line in enumerate(lines):
        if "File Descriptors" in line:
            for following in lines[index + 1 : index + 4]:
                if "limit:" in following and "Sockets" not in following:
                    return int(following.rsplit("limit:", 1)[1].strip())
    return None


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return "unknown"
