"""What a host measurably uses: one record from its agent's heartbeat to the placement engine.

Written by the gateway into the snapshot with every heartbeat, read by the schedulers (the engine
ranks by it: ``least_utilized``) and by the API (``GET /v1/hosts``), journaled with the decisions
that read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MeasuredUsage:
    """A host's last measured usage, and what was allocated on it when the measurement was folded
    into the snapshot: what was allocated since is not in the measurement yet."""

    cpu_used: float  # cores busy
    memory_used_mb: float
    allocated_cpu: int = 0  # the host's allocation at the time of the measurement
    allocated_memory_mb: int = 0

    def in_use(self, allocated_cpu: int, allocated_memory_mb: int) -> tuple[float, float]:
        """cpu and memory in use as best known now, given what is allocated now.

        The measurement plus everything allocated since it was taken: a VM placed after the
        measurement is not in it yet, so it is counted at the full amount it asked for until the
        next measurement shows what it really uses. Without this, every VM of a round (and of the
        seconds until the next heartbeat) would pile onto the host that looked idle. A VM released
        since is not subtracted: the next measurement shows it gone; until then the host looks a
        little busier than it is, which errs on the side of spreading.

        Not ``max(measured, allocated)``: that would rank every host whose VMs are idle by their
        allocation, which is what ``least_loaded`` does already, and measuring would change nothing.
        """
        return (
            self.cpu_used + max(0, allocated_cpu - self.allocated_cpu),
            self.memory_used_mb + max(0, allocated_memory_mb - self.allocated_memory_mb),
        )
