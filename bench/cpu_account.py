"""Where the machine's CPU goes during a benchmark phase: CPU seconds per component, read from /proc.

On a 2-core machine that runs every server and service, throughput is bounded by the sum of what
each component spends per VM. ``cpu_times()`` before and after a phase, ``spent()`` between them,
and ``per_vm_ms()`` turns that into milliseconds of CPU per placement, component by component.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Processes of the servers, by the name the kernel knows them by (comm, at most 15 characters).
SERVER_NAMES = {
    "beam.smp": "rabbitmq",
    "erl_child_setup": "rabbitmq",
    "postgres": "postgresql",
    "redis-server": "redis",
}


def component_of(pid: int, comm: str, named: Mapping[int, str]) -> str:
    """``named`` maps pids we started (services, fleet, load generator) to their component."""
    if pid in named:
        return named[pid]
    return SERVER_NAMES.get(comm, "other")


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(comm, parent pid, CPU seconds of the process and its reaped children) of one process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm is in parentheses and may hold spaces; the fields after the last ')' are fixed.
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    parent = int(fields[1])
    utime, stime = int(fields[11]), int(fields[12])
    return comm, parent, (utime + stime) / CLOCK_TICKS


def cpu_times(named: Mapping[int, str]) -> dict[str, float]:
    """CPU seconds so far per component, over every process on the machine. A process's children
    that are not themselves named (py-spy, a subprocess) count as other."""
    totals: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None:
            continue
        comm, _, seconds = stat
        component = component_of(pid, comm, named)
        totals[component] = totals.get(component, 0.0) + seconds
    return totals


def spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds per component between two readings (processes that exited in between are lost,
    so a component never goes below zero)."""
    return {name: max(0.0, after.get(name, 0.0) - before.get(name, 0.0)) for name in after}


def per_vm_ms(seconds: Mapping[str, float], vms: int) -> dict[str, float]:
    """Milliseconds of CPU per VM per component, largest first, with the total."""
    if vms <= 0:
        return {}
    rows = {name: round(value * 1000 / vms, 3) for name, value in seconds.items() if value > 0}
    ordered = dict(sorted(rows.items(), key=lambda item: -item[1]))
    ordered["total"] = round(sum(seconds.values()) * 1000 / vms, 3)
    return ordered


def cores_busy(seconds: Mapping[str, float], wall: float) -> dict[str, float]:
    """Cores each component kept busy over ``wall`` seconds, largest first, with the total."""
    if wall <= 0:
        return {}
    rows = {name: round(value / wall, 3) for name, value in seconds.items() if value > 0}
    ordered = dict(sorted(rows.items(), key=lambda item: -item[1]))
    ordered["total"] = round(sum(seconds.values()) / wall, 3)
    return ordered
