"""HA capacity (vSphere HA's admission control, "host failures the cluster tolerates"): room kept in
each zone to restart the VMs of its N largest hosts on the others, as pure arithmetic.

A zone tolerates the loss of any N of its hosts F when, for every resource, what the others have free
takes the restartable VMs of F (those whose ``restart_policy`` is not ``never``):

    sum over h not in F of free(h)  >=  sum over h in F of restartable(h)

Adding ``sum over F of free(h)`` to both sides, that is ``sum of free over the zone >= sum over F of
key(h)``, with ``key(h) = free(h) + restartable(h) = effective(h) - unrestartable(h)``: the worst F is
the N hosts of the largest keys (per resource). The **failover headroom** of a zone is

    headroom = sum of free(h) over the zone - sum of the N largest key(h)

and a VM may be placed in the zone only if it asks for no more than the headroom of every resource: a
restartable VM lowers the free sum by its size and leaves its host's key as it was, so the zone still
tolerates N losses after it exactly when ``demand <= headroom``. (A ``never`` VM on one of the
largest hosts lowers that host's key too; counting it as a restartable one is the safe side.)

The rule is the aggregate one (vSphere's "percentage of cluster resources"): it counts room, not how
VMs pack into it, so a restart may still find its room split across hosts. Only hosts that take VMs
count (online, not paused, not fenced): a host that takes no VM neither gives room nor is counted
among the ones that may fail. Hosts without the zone label are one zone of their own, "".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

ZONE_LABEL = "zone"
NO_ZONE = ""
# The resources reserved, in the fit rule's row order: cpu, memory_mb, disk_gb, gpu.
Amounts = tuple[int, int, int, int]
NOTHING: Amounts = (0, 0, 0, 0)
RESOURCE_NAMES = ("cpu", "memory_mb", "disk_gb", "gpu")


@dataclass(frozen=True, slots=True)
class ReserveHost:
    """A host as the reserve counts it (effective: after reserved capacity and overcommit)."""

    host_id: str
    zone: str
    effective: Amounts
    allocated: Amounts
    unrestartable: Amounts  # the allocations of its VMs with restart_policy never


def zone_of(labels: Mapping[str, str]) -> str:
    return labels.get(ZONE_LABEL, NO_ZONE)


def headroom(hosts: Iterable[ReserveHost], reserve_hosts: int) -> dict[str, Amounts]:
    """Each zone's failover headroom with ``reserve_hosts`` of its hosts lost (see the module)."""
    by_zone: dict[str, list[ReserveHost]] = defaultdict(list)
    for host in hosts:
        by_zone[host.zone].append(host)
    return {zone: _zone_headroom(members, reserve_hosts) for zone, members in by_zone.items()}


def _zone_headroom(hosts: Sequence[ReserveHost], reserve_hosts: int) -> Amounts:
    left = []
    for row in range(len(NOTHING)):
        free = sum(h.effective[row] - h.allocated[row] for h in hosts)
        keys = sorted((h.effective[row] - h.unrestartable[row] for h in hosts), reverse=True)
        left.append(free - sum(keys[:reserve_hosts]))
    return (left[0], left[1], left[2], left[3])


def shortfall(demand: Amounts, room: Amounts) -> int | None:
    """The first resource row ``demand`` asks more of than ``room`` holds, or None if it fits. A
    resource it asks none of is not checked (as the fit rule: a zone short of GPUs takes VMs without)."""
    return next(
        (row for row, (asked, kept) in enumerate(zip(demand, room, strict=True)) if asked > 0 and kept < asked), None
    )


def booked(room: Amounts, demand: Amounts) -> Amounts:
    """The headroom left once a VM of ``demand`` is placed in the zone."""
    return (room[0] - demand[0], room[1] - demand[1], room[2] - demand[2], room[3] - demand[3])
