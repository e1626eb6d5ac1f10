"""Measured usage from domain statistics: cores busy (the CPU time the domains used between two
samples, over the time between them) and memory in use (what the domains hold now). Pure: samples
and their times in, :class:`~vmsched_contract.messages.Usage` out.

It measures the domains, not the hypervisor's own processes: an operator holds room back for those
with the host's ``reserved`` (PATCH /v1/hosts/{id}), which the fit rule subtracts.
"""

from __future__ import annotations

from collections.abc import Sequence

from vmsched_agent.libvirt.ports import KIB_PER_MIB, DomainSample
from vmsched_contract.messages import Usage

_NANOSECONDS = 1e9


class UsageMeter:
    """Turns successive samples into usage. The first sample gives none (a rate needs two); a
    domain seen for the first time counts for its memory only until its next sample."""

    def __init__(self, cpus: int) -> None:
        self.cpus = cpus
        self._at: float | None = None
        self._cpu_time: dict[str, int] = {}

    def measure(self, at: float, samples: Sequence[DomainSample]) -> Usage | None:
        """Usage between the previous sample and this one, taken at ``at`` (monotonic seconds)."""
        previous, self._at = self._at, at
        cpu_before, self._cpu_time = self._cpu_time, {sample.name: sample.cpu_time_ns for sample in samples}
        if previous is None or at <= previous:
            return None
        busy_ns = sum(
            max(0, sample.cpu_time_ns - cpu_before[sample.name]) for sample in samples if sample.name in cpu_before
        )
        cores = busy_ns / _NANOSECONDS / (at - previous)
        memory_mib = sum(sample.memory_kib for sample in samples) // KIB_PER_MIB
        # A counter read late and one read early can make a sample look busier than the host is.
        return Usage(cpu_used=round(min(cores, float(self.cpus)), 3), memory_used_mb=memory_mib)

    def forget(self) -> None:
        """Start again (the connection was lost: counters read after it may not follow on)."""
        self._at = None
        self._cpu_time = {}
