"""Which cells a new VM (or a batch) may go to, in the order to try them: a pure function of the
cells' summaries and what is asked (docs/scaling.md, "Cells").

1. Keep the cells whose label sets can satisfy every VM's labels and host selector.
2. Among them, those with room first: each VM fits the largest free amounts of a label set it may
   use, and the batch fits the cell's free total. The others after them (their summary may be stale:
   the cell's scheduler is the judge, and a VM that may wait for room waits there).
3. Least loaded first (:meth:`CellSummary.load`), then fewer waiting VMs, then the name.

A cell without a summary (never read, or unreachable at its last refresh) is never chosen. When no
cell carries the labels asked for, the least-loaded cell is tried alone: its answer (unschedulable,
with the scheduler's reasons) is the one a single installation would give.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from vmsched_contract.cells import CellSummary, LabelSetSummary
from vmsched_contract.messages import HostSelectorTerm
from vmsched_domain.selectors import matches

# The resources a VM body names as top-level fields; named extra resources come in ``extra``.
RESOURCE_FIELDS = ("cpu", "memory_mb", "disk_gb", "gpu")


@dataclass(frozen=True, slots=True)
class Demand:
    """What one VM asks of a cell: amounts per resource (extras by name), labels, host selector."""

    amounts: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    selector: tuple[HostSelectorTerm, ...] = ()

    @classmethod
    def of(cls, body: Mapping[str, Any], default_cpu: int, default_memory_mb: int) -> Demand:
        """The demand of a VM request body, as the cell will read it (its defaults for what is left
        out). Raises ValueError on a body the cell would refuse: the router then chooses without it."""
        try:
            amounts = {name: int(body.get(name) or 0) for name in RESOURCE_FIELDS}
            if body.get("cpu") is None:
                amounts["cpu"] = default_cpu
            if body.get("memory_mb") is None:
                amounts["memory_mb"] = default_memory_mb
            amounts.update({str(name): int(count) for name, count in dict(body.get("extra") or {}).items()})
            labels = {str(key): str(value) for key, value in dict(body.get("labels") or {}).items()}
            selector = tuple(HostSelectorTerm.model_validate(term) for term in body.get("host_selector") or ())
        except (TypeError, ValueError, ValidationError, AttributeError) as error:
            raise ValueError(f"not a VM request: {error}") from None
        return cls(amounts=amounts, labels=labels, selector=selector)


def _usable_sets(summary: CellSummary, demand: Demand) -> list[LabelSetSummary]:
    return [found for found in summary.label_sets if matches(demand.labels, demand.selector, found.labels)]


def carries_labels(summary: CellSummary, demands: Sequence[Demand]) -> bool:
    """Whether every VM finds hosts with the labels it asks for in the cell."""
    return all(_usable_sets(summary, demand) for demand in demands)


def has_room(summary: CellSummary, demands: Sequence[Demand]) -> bool:
    """Whether, by the summary, every VM fits a host of a label set it may use and the batch fits the
    cell's free total. (The largest free amounts of a set may sit on different hosts: a cell that
    looks roomy may still answer unschedulable, and the next cell is tried.)"""
    total: dict[str, int] = {}
    for demand in demands:
        if not any(
            all(found.largest.get(name, 0) >= amount for name, amount in demand.amounts.items() if amount > 0)
            for found in _usable_sets(summary, demand)
        ):
            return False
        for name, amount in demand.amounts.items():
            total[name] = total.get(name, 0) + amount
    return all(summary.free.get(name, 0) >= amount for name, amount in total.items() if amount > 0)


def _busyness(name: str, summary: CellSummary) -> tuple[float, int, str]:
    return (summary.load(), summary.waiting, name)


def cells_to_try(summaries: Mapping[str, CellSummary | None], demands: Sequence[Demand]) -> list[str]:
    """The cells to try for ``demands`` (one VM, or a batch that goes to one cell), in order."""
    known = {name: summary for name, summary in summaries.items() if summary is not None}
    if not known:
        return []
    by_load = sorted(known, key=lambda name: _busyness(name, known[name]))
    carrying = [name for name in by_load if carries_labels(known[name], demands)]
    if not carrying:
        return by_load[:1]
    roomy = [name for name in carrying if has_room(known[name], demands)]
    return roomy + [name for name in carrying if name not in roomy]


def least_loaded(summaries: Mapping[str, CellSummary | None]) -> list[str]:
    """Cells for something that asks no capacity (a server group): least loaded first."""
    return cells_to_try(summaries, [])
