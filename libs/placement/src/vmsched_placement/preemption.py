"""Preemption: which lower-priority VMs to remove from which host so that a VM that fits nowhere fits.

Kubernetes' default preemption, reduced to what a VM cloud needs:

1. **Where**: only hosts that pass every filter *but* the resource ones (``cpu``, ``memory``, ``disk``,
   ``gpu``, ``extra``) can become a home by removing VMs: a host the VM's selector, taints or server
   group refuse stays refused however empty it gets (:func:`preemptible_rows`).
2. **Whom, on one host** (:func:`victims_on`): the cheapest set of VMs of lower priority whose
   removal lets the VM fit: lowest priorities first (the smallest highest-victim priority that can
   make room), then fewest VMs (the VMs that cover most of what is missing are taken first; then every
   victim the VM could still fit without is reprieved, so no VM is preempted for nothing).
3. **Which host** (:func:`cheapest`): the host whose set costs least, by (highest victim priority,
   number of victims, sum of their priorities); among equals, one drawn at random in a scheduler (the
   lowest host id without a random source).

Pure: the residents of each host (its VMs that hold capacity, with their priorities) are handed in.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vmsched_domain.fit import extra_shortfall, fits
from vmsched_placement.filters import FILTERS
from vmsched_placement.fleet import Fleet
from vmsched_placement.model import DecisionContext, Demand, HostState, PlacementRequest, RequestVector

# The filters a removal of VMs can change the verdict of.
RESOURCE_FILTERS = frozenset({"cpu", "memory", "disk", "gpu", "extra"})


@dataclass(frozen=True, slots=True)
class Resident:
    """A VM holding capacity on a host: what removing it would give back, and its priority."""

    vm_id: str
    priority: int
    demand: Demand


@dataclass(frozen=True, slots=True)
class Victims:
    """The VMs to remove from ``host_id`` so that the preemptor fits there."""

    host_id: str
    vms: tuple[Resident, ...]

    @property
    def cost(self) -> tuple[int, int, int]:
        """Lower is cheaper: highest victim priority, then how many, then their summed priority."""
        priorities = [vm.priority for vm in self.vms]
        return max(priorities), len(priorities), sum(priorities)


def preemptible_rows(fleet: Fleet, request: PlacementRequest, context: DecisionContext) -> list[int]:
    """Rows of the hosts that pass every filter but the resource ones, in host id order."""
    vector = RequestVector.of(request, context)
    columns = fleet.columns
    passing = np.ones(len(columns), dtype=np.bool_)
    for host_filter in FILTERS:
        if host_filter.NAME in RESOURCE_FILTERS:
            continue
        among = getattr(host_filter, "mask_among", None)
        passes = host_filter.mask(columns, vector) if among is None else among(columns, vector, passing)
        if passes is not None:
            np.logical_and(passing, passes, out=passing)
    rows: list[int] = np.flatnonzero(passing).tolist()
    return rows


def fits_after(host: HostState, demand: Demand, removed: Iterable[Resident]) -> bool:
    """Whether ``demand`` fits on ``host`` once ``removed`` give back what they hold."""
    allocated = host.allocated
    for vm in removed:
        allocated = allocated.minus_floored(vm.demand)
    if not fits(demand, host.capacity, host.reserved, host.ratios, allocated):
        return False
    return extra_shortfall(dict(demand.extra), dict(host.capacity.extra), dict(allocated.extra)) is None


def victims_on(host: HostState, demand: Demand, priority: int, residents: Sequence[Resident]) -> Victims | None:
    """The cheapest set of ``residents`` of priority below ``priority`` whose removal lets ``demand``
    fit on ``host``; None when removing all of them would not do (or nothing needs removing)."""
    if fits_after(host, demand, ()):
        return None  # it fits already: nothing to preempt here
    lower = sorted((vm for vm in residents if vm.priority < priority), key=lambda vm: (vm.priority, vm.vm_id))
    # 1. The lowest priority level whose removal, with every level below it, makes room.
    levels = sorted({vm.priority for vm in lower})
    ceiling = next((level for level in levels if fits_after(host, demand, _up_to(lower, level))), None)
    if ceiling is None:
        return None
    candidates = _up_to(lower, ceiling)
    # 2. Fewest VMs: take the VM that covers most of what is still missing until the VM fits...
    chosen: list[Resident] = []
    left = list(candidates)
    while not fits_after(host, demand, chosen):
        missing = _missing(host, demand, chosen)
        best = min(left, key=lambda vm: (-_coverage(vm.demand, missing), vm.priority, vm.vm_id))
        chosen.append(best)
        left.remove(best)
    # ...then reprieve each victim the VM fits without, the highest priority first.
    for vm in sorted(chosen, key=lambda vm: (-vm.priority, vm.vm_id)):
        kept = [other for other in chosen if other is not vm]
        if fits_after(host, demand, kept):
            chosen = kept
    return Victims(host.id, tuple(sorted(chosen, key=lambda vm: (vm.priority, vm.vm_id))))


def tied(
    hosts: Iterable[HostState], demand: Demand, priority: int, residents: Mapping[str, Sequence[Resident]]
) -> list[Victims]:
    """The victims of every host among ``hosts`` whose set costs least of all (:attr:`Victims.cost`),
    in host id order: the sets a choice is drawn among. Only these hosts' residents matter to the
    choice (the decision journal keeps no others)."""
    found = (victims_on(host, demand, priority, residents.get(host.id, ())) for host in hosts)
    sets = sorted((victims for victims in found if victims is not None), key=lambda v: (v.cost, v.host_id))
    return [victims for victims in sets if victims.cost == sets[0].cost]


def drawn(
    hosts: Iterable[HostState], demand: Demand, priority: int, residents: Mapping[str, Sequence[Resident]], seed: int
) -> tuple[Victims | None, list[Victims]]:
    """A scheduler's choice: among the hosts that have residents, one of the equally cheapest
    (:func:`tied`) drawn from ``seed``; and those it was drawn among (whose residents the decision
    journal keeps, so that a replay draws the same)."""
    sets = tied([host for host in hosts if host.id in residents], demand, priority, residents)
    return (random.Random(seed).choice(sets) if sets else None), sets


def cheapest(
    hosts: Iterable[HostState],
    demand: Demand,
    priority: int,
    residents: Mapping[str, Sequence[Resident]],
    rng: random.Random | None = None,
) -> Victims | None:
    """The host whose victims cost least (:attr:`Victims.cost`), or None. Among hosts of equal cost,
    the lowest host id; or, given ``rng``, one drawn from it: schedulers preempting at once then
    spread over the equally cheap hosts instead of all racing for the first."""
    sets = tied(hosts, demand, priority, residents)
    if not sets:
        return None
    return sets[0] if rng is None else rng.choice(sets)


def _up_to(lower: Sequence[Resident], level: int) -> list[Resident]:
    return [vm for vm in lower if vm.priority <= level]


def _missing(host: HostState, demand: Demand, removed: Sequence[Resident]) -> tuple[float, ...]:
    """Per fixed resource the VM asks for, how much is missing once ``removed`` are gone (0: enough);
    extras count as one more resource, summed over names."""
    free = host.free
    for vm in removed:
        free = free.plus(vm.demand)
    extra_free = dict(host.capacity.extra)
    for name, used in host.allocated.extra:
        extra_free[name] = extra_free.get(name, 0) - used
    for vm in removed:
        for name, held in vm.demand.extra:
            extra_free[name] = extra_free.get(name, 0) + held
    fixed = tuple(
        float(max(0, need - have)) if need > 0 else 0.0
        for need, have in zip(demand.as_tuple(), free.as_tuple(), strict=True)
    )
    extra = sum(max(0, need - extra_free.get(name, 0)) for name, need in demand.extra)
    return (*fixed, float(extra))


def _coverage(held: Demand, missing: tuple[float, ...]) -> float:
    """How much of what is missing removing a VM that holds ``held`` gives back: the sum, over the
    missing resources, of the share of each it covers (a VM covering every shortage scores highest)."""
    gives = (*map(float, held.as_tuple()), float(sum(amount for _, amount in held.extra)))
    return sum(min(give, short) / short for give, short in zip(gives, missing, strict=True) if short > 0)


__all__ = ["RESOURCE_FILTERS", "Resident", "Victims", "cheapest", "drawn", "preemptible_rows", "tied", "victims_on"]
