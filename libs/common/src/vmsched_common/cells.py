"""What a cell tells the cell router about itself (``GET /v1/summary``), and how it is computed.

A cell is one whole vmsched installation (docs/scaling.md, "Cells"). The router chooses a cell for a
VM from this summary: which label sets the cell's hosts carry, how much room each set has, how busy
the cell is. It is a summary, never per host: its size grows with the label sets, not the hosts.

Room is the fit rule's (:mod:`vmsched_common.fit`): what a host may still hand out of a resource is
``allocatable - allocated``. Only hosts that take new VMs count (online, scheduling not paused).
Taints are not summarised: a cell whose room is all on tainted hosts looks roomy to the router, and
its scheduler's answer (unschedulable) sends the VM to the next cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, Field

from vmsched_common.db.records import HostRecord
from vmsched_common.fit import RESOURCES, allocatable, ratio_of
from vmsched_common.messages import HostStatus

Amounts = dict[str, int]


class LabelSetSummary(BaseModel):
    """The schedulable hosts of a cell that carry exactly these labels."""

    labels: dict[str, str]
    hosts: int
    free: Amounts = Field(description="summed over these hosts: what each may still take, per resource")
    largest: Amounts = Field(
        description="per resource, the most any one of these hosts may still take (taken separately per "
        "resource: the largest cpu and the largest memory may be on different hosts)"
    )


class CellSummary(BaseModel):
    """A cell's capacity, summarised for the cell router (``GET /v1/summary``)."""

    hosts: int = Field(description="every host the cell knows, whatever its status")
    schedulable_hosts: int = Field(description="hosts online with scheduling not paused")
    allocatable: Amounts = Field(description="what the schedulable hosts may hand out in all, per resource")
    free: Amounts = Field(description="what they may still hand out, per resource")
    waiting: int = Field(description="VMs waiting for room (status waiting)")
    label_sets: list[LabelSetSummary] = Field(description="the schedulable hosts grouped by their labels")

    def load(self) -> float:
        """How full the cell is, 0..1: the mean of its cpu and memory allocated shares (1 when it has
        no room at all), the number least-loaded choice compares."""
        shares = []
        for resource in ("cpu", "memory_mb"):
            total = self.allocatable.get(resource, 0)
            shares.append(1.0 if total <= 0 else 1.0 - min(self.free.get(resource, 0), total) / total)
        return sum(shares) / len(shares)


def _free_of(host: HostRecord) -> tuple[Amounts, Amounts]:
    """What ``host`` may hand out in all and what it may still hand out, per resource (its named
    extra resources by name)."""
    total: Amounts = {}
    free: Amounts = {}
    for rule in RESOURCES:
        limit = int(
            allocatable(
                getattr(host.capacity, rule.field), getattr(host.reserved, rule.field), ratio_of(rule, host.overcommit)
            )
        )
        total[rule.field] = max(limit, 0)
        free[rule.field] = max(limit - getattr(host.allocated, rule.field), 0)
    for name, count in host.capacity.extra.items():
        total[name] = count
        free[name] = max(count - host.allocated.extra.get(name, 0), 0)
    return total, free


def _add(into: Amounts, amounts: Mapping[str, int]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0) + amount


def takes_new_vms(host: HostRecord) -> bool:
    return host.status == HostStatus.ONLINE.value and not host.scheduling_paused


def summarize(hosts: Iterable[HostRecord], waiting: int) -> CellSummary:
    """The summary of a cell whose hosts are ``hosts`` and which has ``waiting`` VMs waiting."""
    known = 0
    schedulable = 0
    cell_total: Amounts = {}
    cell_free: Amounts = {}
    sets: dict[tuple[tuple[str, str], ...], LabelSetSummary] = {}
    for host in hosts:
        known += 1
        if not takes_new_vms(host):
            continue
        schedulable += 1
        total, free = _free_of(host)
        _add(cell_total, total)
        _add(cell_free, free)
        key = tuple(sorted(host.labels.items()))
        found = sets.get(key)
        if found is None:
            sets[key] = LabelSetSummary(labels=dict(key), hosts=1, free=dict(free), largest=dict(free))
            continue
        found.hosts += 1
        _add(found.free, free)
        for name, amount in free.items():
            found.largest[name] = max(found.largest.get(name, 0), amount)
    return CellSummary(
        hosts=known,
        schedulable_hosts=schedulable,
        allocatable=cell_total,
        free=cell_free,
        waiting=waiting,
        label_sets=[sets[key] for key in sorted(sets)],
    )
