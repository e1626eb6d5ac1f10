"""The processes a run started: their CPU with nothing placed, peak memory, micro-batch sizes, and
py-spy samples on request (BENCH_PYSPY)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.cpu_account import cores_busy, cpu_times, spent
from bench.e2e.fleets import Fleet
from bench.e2e.plan import IDLE_SECONDS
from devtools.stack import Stack


def peak_rss_mb(pid: int) -> float:
    """The process's high-water mark of resident memory (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextlib.contextmanager
def profiled(stack: Stack, fleets: Sequence[Fleet], label: str) -> Iterator[None]:
    """With BENCH_PYSPY=DIR, py-spy samples every service (and the fleet) while the block runs and
    leaves collapsed stacks in DIR/<label>-<service>.txt (flamegraph.pl or speedscope read them)."""
    target = os.environ.get("BENCH_PYSPY")
    if not target:
        yield
        return
    Path(target).mkdir(parents=True, exist_ok=True)
    pids = {name: service.pid for name, service in stack.services.items()}
    pids.update({f"fleet{n}": fleet.process.pid for n, fleet in enumerate(fleets)})
    command = [
        str(Path(sys.executable).parent / "py-spy"),
        "record",
        "--nonblocking",
        "--format",
        "raw",
        "--rate",
        "50",
    ]
    spies = [
        subprocess.Popen(
            [*command, "--pid", str(pid), "--output", str(Path(target) / f"{label}-{name}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(30)


def mean_batch_sizes(stack: Stack) -> dict[str, float]:
    """Mean items per micro-batch so far (``vmsched_batch_size``), per batch, over every service."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    urls = [service.metrics_url for service in stack.services.values() if service.metrics_url]
    urls.append(f"{stack.api_url}/metrics")
    for url in urls:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode().splitlines():
                for suffix, into in (("_sum", sums), ("_count", counts)):
                    prefix = f'vmsched_batch_size{suffix}{{batch="'
                    if line.startswith(prefix):
                        name = line[len(prefix) : line.index('"', len(prefix))]
                        into[name] = into.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return {name: round(sums[name] / counts[name], 1) for name in sums if counts.get(name)}


def component_pids(stack: Stack, fleets: Sequence[Fleet]) -> dict[int, str]:
    """The processes this harness started, by component (schedulers together), for cpu_account."""
    named = {service.pid: name.split("-")[0] for name, service in stack.services.items()}
    named.update({fleet.process.pid: "fleet" for fleet in fleets})
    named[os.getpid()] = "load generator"
    return named


def idle_cores(stack: Stack, fleets: Sequence[Fleet]) -> dict[str, float]:
    """What the fleet costs with nothing being placed (heartbeats, sweeps, reconciliation), in cores
    per component over one heartbeat period: the background every placement shares the machine with."""
    named = component_pids(stack, fleets)
    before, began = cpu_times(named), time.monotonic()
    time.sleep(IDLE_SECONDS)  # a measurement window, not a wait for anything
    return cores_busy(spent(before, cpu_times(named)), time.monotonic() - began)
