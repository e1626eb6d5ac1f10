"""The waiting VMs in memory, grouped by shape, and whom to wake when capacity appears. Pure.

Waiting VMs of one *shape* (the same demand and the same hard constraints) are interchangeable to
the fit rule: if the oldest of a shape does not fit a host, none of its shape does. So a change to a
host costs one cheap test per shape, not one per waiting VM: 10,000 VMs waiting in a few shapes
cost what a few do. Within a shape, the oldest (by request time) is woken first; across shapes, the
oldest head first, each booked on the fleet before the next is tried, so one freed slot wakes one
VM, not every VM that fits it.

A member of a server group is not like the others: whether a host may take it depends on where its
group's members are, and a member released anywhere in a domain (a zone, say) can open every host
of that domain, not only the one it left. So a shape names its group too (members of one group with
the same demand and constraints queue together, oldest first), its head is decided with the group's
rule and members (:class:`~vmsched_scheduler.groups.RoundGroups`, each wake booked there as on the
fleet), and the waker tests group shapes against the whole fleet, never against the changed hosts
alone (:attr:`Shape.needs_whole_fleet`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from uuid import UUID

import numpy as np

from vmsched_contract.messages import VmToPlace
from vmsched_contract.strategy import Strategy
from vmsched_domain.storage import VolumeAsk, per_pool
from vmsched_placement import DecisionContext, Demand, Fleet, HostState, PlacementRequest, decide
from vmsched_placement.fleet import FloatArray
from vmsched_placement.inputs import demand_of, host_selector_of, tolerations_of, volumes_of
from vmsched_placement.model import ONLINE, SelectorTerm
from vmsched_placement.taint_rules import Toleration
from vmsched_scheduler.groups import RoundGroups


@dataclass(frozen=True, slots=True)
class Shape:
    """What makes waiting VMs interchangeable to the filters: their demand and every hard constraint
    (exact labels, host selector, tolerations, networks, dedication, server group). A new hard constraint on VMs belongs
    here too, or the waker wakes VMs no changed host may take and misses those it may."""

    demand: Demand
    labels: tuple[tuple[str, str], ...]
    host_selector: tuple[SelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    server_group: UUID | None = None
    networks: frozenset[str] = frozenset()
    project: str = ""  # a dedicated host takes only its project's VMs
    dedicated: bool = False
    volumes: tuple[VolumeAsk, ...] = ()

    @property
    def needs_whole_fleet(self) -> bool:
        """Whether a host may take it depends on other hosts too (its group's members per domain, or
        a shared storage pool's room, freed by a VM leaving any host that reaches it)."""
        return self.server_group is not None or bool(self.volumes)

    def request(self, entry: WaitingEntry, groups: RoundGroups | None) -> PlacementRequest:
        """What the engine is asked for the shape's VM ``entry``: any strategy will do, only whether
        some host passes every filter matters."""
        return PlacementRequest(
            vm_id=str(entry.vm_id),
            name=entry.vm.name,
            demand=self.demand,
            labels=dict(self.labels),
            strategy=Strategy.LEAST_LOADED,
            host_selector=self.host_selector,
            tolerations=self.tolerations,
            group=groups.placement_group(entry.vm) if groups is not None else None,
            networks=self.networks,
            project=self.project,
            dedicated=self.dedicated,
            volumes=self.volumes,
        )


def shape_of(vm: VmToPlace) -> Shape:
    return Shape(
        demand_of(vm.resources),
        tuple(sorted(vm.labels.items())),
        host_selector_of(vm.host_selector),
        tolerations_of(vm.tolerations),
        vm.server_group,
        frozenset(vm.networks),
        vm.project,
        vm.dedicated,
        volumes_of(vm.volumes),
    )


@dataclass(frozen=True, slots=True, order=True)
class WaitingEntry:
    """One waiting VM: ordered by request time, then id (oldest first)."""

    since: float  # when it was requested, epoch seconds
    vm_id: UUID
    attempt: int = field(compare=False)
    vm: VmToPlace = field(compare=False)
    wait_until: float = field(compare=False)

    @property
    def shape(self) -> Shape:
        return shape_of(self.vm)


class WaitingIndex:
    """Waiting VMs by shape, each shape's oldest first. Removal is lazy: a removed entry is skipped
    when it reaches the head of its shape."""

    def __init__(self) -> None:
        self._entries: dict[UUID, WaitingEntry] = {}
        self._queues: dict[Shape, list[WaitingEntry]] = {}
        self._shape_demands: FloatArray | None = None  # (shapes, 4), rebuilt when shapes change
        self._shape_order: list[Shape] = []

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, vm_id: object) -> bool:
        return vm_id in self._entries

    def get(self, vm_id: UUID) -> WaitingEntry | None:
        return self._entries.get(vm_id)

    def add(self, entry: WaitingEntry) -> bool:
        """Index ``entry``; False (and nothing changes) when that VM is known at that attempt."""
        known = self._entries.get(entry.vm_id)
        if known is not None and known.attempt == entry.attempt:
            return False
        self._entries[entry.vm_id] = entry
        shape = entry.shape
        queue = self._queues.get(shape)
        if queue is None:
            self._queues[shape] = queue = []
            self._shape_demands = None
        heapq.heappush(queue, entry)
        return True

    def remove(self, vm_id: UUID) -> WaitingEntry | None:
        return self._entries.pop(vm_id, None)

    def clear(self) -> None:
        self._entries.clear()
        self._queues.clear()
        self._shape_demands = None

    def head(self, shape: Shape) -> WaitingEntry | None:
        """The oldest VM of ``shape`` still indexed (dropping removed ones; a shape left empty goes)."""
        queue = self._queues.get(shape)
        while queue:
            entry = queue[0]
            if self._entries.get(entry.vm_id) is entry:
                return entry
            heapq.heappop(queue)
        if queue is not None:
            del self._queues[shape]
            self._shape_demands = None
        return None

    @property
    def shapes(self) -> int:
        return len(self._queues)

    def shapes_fitting(self, rooms: Sequence[Demand]) -> list[Shape]:
        """The shapes whose demand fits within at least one of ``rooms`` (free capacity of hosts that
        changed): the cheap first test, vectorised over the shapes."""
        if not rooms or not self._queues:
            return []
        if self._shape_demands is None:
            self._shape_order = list(self._queues)
            self._shape_demands = np.array([s.demand.as_tuple() for s in self._shape_order], dtype=np.float64)
        free = np.array([room.as_tuple() for room in rooms], dtype=np.float64)
        within = np.all(self._shape_demands[:, None, :] <= free[None, :, :], axis=2)  # (shapes, rooms)
        fitting = []
        for i in np.flatnonzero(np.any(within, axis=1)).tolist():
            shape = self._shape_order[i]
            # Named extras, for the few shapes that ask any: in a room that fits the rest.
            if not shape.demand.extra or any(
                _extras_within(shape.demand, rooms[j]) for j in np.flatnonzero(within[i]).tolist()
            ):
                fitting.append(shape)
        return fitting

    def all_shapes(self) -> list[Shape]:
        return list(self._queues)


def _extras_within(demand: Demand, room: Demand) -> bool:
    free = dict(room.extra)
    return all(free.get(name, 0) >= count for name, count in demand.extra)


def usable(host: HostState) -> bool:
    return host.status == ONLINE and not host.scheduling_paused


def room_grew(before: HostState | None, after: HostState) -> bool:
    """Whether ``after`` may take a VM that ``before`` could not: a new or newly usable host (added,
    back online, unpaused), other labels or taints (an operator's), or more free capacity of some
    resource (a VM released, capacity grown, reserve or ratio changed)."""
    if not usable(after):
        return False
    if before is None or not usable(before) or before.labels != after.labels or before.taints != after.taints:
        return True
    now_free, was_free = after.free, before.free
    if any(a > b for a, b in zip(now_free.as_tuple(), was_free.as_tuple(), strict=True)):
        return True
    was = dict(was_free.extra)
    return any(count > was.get(name, 0) for name, count in now_free.extra)


@dataclass(frozen=True, slots=True)
class Wake:
    """A waiting VM to decide again, and the host it was booked on in the waker's copy."""

    entry: WaitingEntry
    host_id: str


def whom_to_wake(
    index: WaitingIndex,
    fleet: Fleet,
    shapes: Iterable[Shape],
    context: DecisionContext,
    groups: RoundGroups | None = None,
) -> list[Wake]:
    """The waiting VMs of ``shapes`` that some host of ``fleet`` takes now, oldest first, taken out
    of ``index``. The oldest head of all is decided against the fleet (every filter, its server
    group's rule with ``groups``' members); if a host takes it, it is booked there (and in its
    group) and its shape's next VM becomes a head; a shape whose head fits nowhere is done.
    ``fleet`` and ``groups`` keep the bookings, so the VMs woken add up to what the hosts take."""
    heads: list[tuple[WaitingEntry, Shape]] = []
    for shape in shapes:
        head = index.head(shape)
        if head is not None:
            heads.append((head, shape))
    heapq.heapify(heads)
    woken: list[Wake] = []
    while heads:
        entry, shape = heapq.heappop(heads)
        decision = decide(fleet, shape.request(entry, groups), context, fallbacks=0)
        if decision.host_id is None:
            continue
        fleet.allocate(decision.host_id, shape.demand, per_pool(shape.volumes, decision.volumes))
        if groups is not None:
            groups.book(entry.vm, fleet, decision.host_id)
        index.remove(entry.vm_id)
        woken.append(Wake(entry, decision.host_id))
        following = index.head(shape)
        if following is not None:
            heapq.heappush(heads, (following, shape))
    return woken
