"""Preemption under disruption budgets (vmsched_domain.disruption): which residents a choice of
victims may take, and PostgreSQL's check of the victims a settlement takes. The settlement locks the
victims' groups' rows (after the VMs', before the hosts'), so two schedulers preempting members of
one group queue on each other and the second sees the first's victims as unavailable."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from uuid import UUID

from vmsched_domain.disruption import Budget
from vmsched_domain.vm_changes import Change
from vmsched_placement import Demand
from vmsched_placement.model import extras_of
from vmsched_placement.preemption import Resident


def offered(rows: Iterable[Any], groups: Mapping[UUID, Budget]) -> dict[str, list[Resident]]:
    """The residents of each host (``rows`` ordered by host, priority, id) a choice may take: per
    host, a group's members beyond what its budget has left are not offered (the lowest priorities
    first), so no set of victims on one host takes more than the budget allows."""
    found: dict[str, list[Resident]] = {}
    taken: Counter[tuple[str, UUID]] = Counter()
    for row in rows:
        budget = groups.get(row.server_group) if row.server_group is not None else None
        if budget is not None:
            key = (row.hypervisor_id, budget.group_id)
            if budget.refusal(taken[key] + 1) is not None:
                continue
            taken[key] += 1
        demand = Demand(row.cpu, row.memory_mb, row.disk_gb, row.gpu, extras_of(row.extra or {}))
        found.setdefault(row.hypervisor_id, []).append(Resident(str(row.id), row.priority, demand))
    return found


def disrupted(changes: Sequence[Change]) -> Counter[UUID]:
    """How many members of each server group ``changes`` preempt."""
    return Counter(change.before.server_group for change in changes if change.before.server_group is not None)


def refused(groups: Mapping[UUID, Budget], taking: Counter[UUID]) -> str | None:
    """Why the victims ``taking`` (per group) may not be preempted now, or None."""
    return next(
        (why for group_id, count in taking.items() if group_id in groups and (why := groups[group_id].refusal(count))),
        None,
    )
