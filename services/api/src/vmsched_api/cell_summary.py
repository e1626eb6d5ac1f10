"""How a cell computes what it tells the cell router about itself (``GET /v1/summary``, the body is
:class:`vmsched_contract.cells.CellSummary`).

A cell is one whole vmsched installation (docs/scaling.md, "Cells"). The router chooses a cell for a
VM from this summary: which label sets the cell's hosts carry, how much room each set has, how busy
the cell is. It is a summary, never per host: its size grows with the label sets, not the hosts.

Room is the fit rule's (:mod:`vmsched_domain.fit`): what a host may still hand out of a resource is
``allocatable - allocated``. Only hosts that take new VMs count (online, scheduling not paused).
Taints are not summarised: a cell whose room is all on tainted hosts looks roomy to the router, and
its scheduler's answer (unschedulable) sends the VM to the next cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from vmsched_contract.cells import Amounts, CellSummary, LabelSetSummary
from vmsched_contract.messages import HostStatus
from vmsched_domain.fit import RESOURCES, allocatable
from vmsched_domain.records import HostRecord

# The resources every host has, in the fit rule's order, with the attribute of their ratio.
_FIELDS = tuple(rule.field for rule in RESOURCES)
_RATIOS = tuple((rule.field, rule.name if rule.overcommits else None) for rule in RESOURCES)


def _room_of(host: HostRecord) -> tuple[list[int], list[int]]:
    """What ``host`` may hand out in all and what it may still hand out, per resource of
    :data:`RESOURCES` (the fit rule's ``allocatable``; never below 0)."""
    total = []
    free = []
    for field, ratio in _RATIOS:
        limit = int(
            allocatable(
                getattr(host.capacity, field),
                getattr(host.reserved, field),
                1.0 if ratio is None else float(getattr(host.overcommit, ratio)),
            )
        )
        total.append(max(limit, 0))
        free.append(max(limit - getattr(host.allocated, field), 0))
    return total, free


def _add(into: Amounts, amounts: Mapping[str, int]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0) + amount


def takes_new_vms(host: HostRecord) -> bool:
    return host.status == HostStatus.ONLINE.value and not host.scheduling_paused


class _Set:
    """A label set being summed (plain lists: a pydantic model per host would cost more than the sum)."""

    __slots__ = ("extra_free", "extra_largest", "free", "hosts", "largest")

    def __init__(self) -> None:
        self.hosts = 0
        self.free = [0] * len(_FIELDS)
        self.largest = [0] * len(_FIELDS)
        self.extra_free: Amounts = {}
        self.extra_largest: Amounts = {}

    def add(self, free: list[int], extra: Mapping[str, int]) -> None:
        self.hosts += 1
        for index, amount in enumerate(free):
            self.free[index] += amount
            if amount > self.largest[index]:
                self.largest[index] = amount
        for name, amount in extra.items():
            self.extra_free[name] = self.extra_free.get(name, 0) + amount
            self.extra_largest[name] = max(self.extra_largest.get(name, 0), amount)

    def summary(self, labels: dict[str, str]) -> LabelSetSummary:
        return LabelSetSummary(
            labels=labels,
            hosts=self.hosts,
            free={**dict(zip(_FIELDS, self.free, strict=True)), **self.extra_free},
            largest={**dict(zip(_FIELDS, self.largest, strict=True)), **self.extra_largest},
        )


def summarize(hosts: Iterable[HostRecord], waiting: int) -> CellSummary:
    """The summary of a cell whose hosts are ``hosts`` and which has ``waiting`` VMs waiting."""
    known = 0
    schedulable = 0
    cell_total = [0] * len(_FIELDS)
    cell_free = [0] * len(_FIELDS)
    extra_total: Amounts = {}
    extra_free: Amounts = {}
    sets: dict[tuple[tuple[str, str], ...], _Set] = {}
    for host in hosts:
        known += 1
        if not takes_new_vms(host):
            continue
        schedulable += 1
        total, free = _room_of(host)
        for index in range(len(_FIELDS)):
            cell_total[index] += total[index]
            cell_free[index] += free[index]
        # Named extra resources: whole units, never overcommitted, nothing reserved (vmsched_domain.fit).
        extra = {name: max(count - host.allocated.extra.get(name, 0), 0) for name, count in host.capacity.extra.items()}
        _add(extra_total, host.capacity.extra)
        _add(extra_free, extra)
        key = tuple(sorted(host.labels.items()))
        found = sets.get(key)
        if found is None:
            found = sets[key] = _Set()
        found.add(free, extra)
    return CellSummary(
        hosts=known,
        schedulable_hosts=schedulable,
        allocatable={**dict(zip(_FIELDS, cell_total, strict=True)), **extra_total},
        free={**dict(zip(_FIELDS, cell_free, strict=True)), **extra_free},
        waiting=waiting,
        label_sets=[sets[key].summary(dict(key)) for key in sorted(sets)],
    )
