"""Rebalancing plans: moves of running VMs that make the fleet more even (``spread``) or empty hosts
(``pack``), each move a migration the placement engine itself would accept.

Pure, like ``whatif``: the caller hands a fleet it may change (a private copy of the snapshot) and the
VMs on it. Every move is chosen by ``decide`` for a migration request (every filter: the migration
capability, labels, host selector, taints, server groups, every resource with its overcommit), on the
fleet as the moves before it left it, so a plan applied in order never passes through a state that
breaks a hard rule (a property test proves it with ``move_refusal``).

Scores (``fleet_score``): ``spread`` is the standard deviation of the hosts' weighted utilisation
(lower is better); ``pack`` is the count of hosts without VMs (higher is better). A move's ``gain``
is how much it improves the score, so the gains of a plan add up to ``after - before`` (or
``before - after`` for spread).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from uuid import UUID

import numpy as np

from vmsched_contract.rebalance import Goal
from vmsched_contract.strategy import Strategy
from vmsched_domain.groups import GroupRule, domain_of
from vmsched_placement.engine import decide, verdict
from vmsched_placement.fleet import Fleet, FloatArray
from vmsched_placement.model import (
    CPU,
    DISK,
    MEMORY,
    ONLINE,
    DecisionContext,
    Migration,
    PlacementGroup,
    PlacementRequest,
)

# Spread: the most utilised hosts tried as sources per move, and a source's largest VMs tried on each.
SPREAD_SOURCES = 16
SPREAD_VMS_PER_SOURCE = 8
# Pack: hosts tried for emptying, at most, per move the plan may make (a failed try costs decisions).
PACK_TRIES_PER_MOVE = 4
# A spread move must lower the deviation by more than this (rounding, not an improvement).
MIN_SPREAD_GAIN = 1e-9


@dataclass(frozen=True, slots=True)
class MovableVm:
    """A running VM the plan may move: where it is, what it asks of a host (its ``request``: demand,
    labels, host selector, tolerations) and its server group's rule, if any."""

    request: PlacementRequest
    host_id: str
    group: GroupRule | None = None


@dataclass(frozen=True, slots=True)
class Move:
    vm_id: str
    source: str
    target: str
    gain: float


@dataclass(frozen=True, slots=True)
class Plan:
    goal: Goal
    moves: tuple[Move, ...]
    score_before: float
    score_after: float


def fleet_score(fleet: Fleet, goal: Goal, context: DecisionContext, hosts: Collection[str] | None = None) -> float:
    """The fleet's score for ``goal`` over ``hosts`` (None: every host): the standard deviation of
    weighted utilisation (spread), or the hosts without VMs (pack)."""
    rows = _rows(fleet, hosts)
    if goal is Goal.PACK:
        counts = np.fromiter((fleet.host_at(int(row)).vm_count for row in rows), np.int64, len(rows))
        return float(np.count_nonzero(counts == 0))
    if len(rows) == 0:
        return 0.0
    return float(np.std(_weighted_utilisation(fleet, context)[rows]))


def _rows(fleet: Fleet, hosts: Collection[str] | None) -> np.ndarray:
    if hosts is None:
        return np.arange(len(fleet))
    found = (fleet.index_of(host_id) for host_id in hosts)
    return np.array(sorted(index for index in found if index is not None), dtype=np.intp)


def _weighted_utilisation(fleet: Fleet, context: DecisionContext) -> FloatArray:
    weights = context.weights
    total = weights.cpu + weights.memory + weights.disk
    cpu, memory, disk = (weights.cpu, weights.memory, weights.disk) if total > 0 else (1.0, 1.0, 1.0)
    utilisation = fleet.columns.utilisation
    mixed: FloatArray = (cpu * utilisation[CPU] + memory * utilisation[MEMORY] + disk * utilisation[DISK]) / (
        cpu + memory + disk
    )
    return mixed


class _Groups:
    """Each server group's members per domain as the plan has moved them so far: from ``known`` (the
    snapshot's count, every member whatever its status) when given, else counted from ``vms``."""

    def __init__(
        self,
        fleet: Fleet,
        vms: Sequence[MovableVm],
        placed: Mapping[str, str],
        known: Mapping[UUID, Mapping[str, int]] | None,
    ) -> None:
        self.members: dict[UUID, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.fleet = fleet
        if known is not None:
            for group_id, members in known.items():
                self.members[group_id].update(members)
            return
        for vm in vms:
            if vm.group is not None:
                domain = self._domain(vm.group, placed[vm.request.vm_id])
                if domain is not None:
                    self.members[vm.group.id][domain] += 1

    def _domain(self, rule: GroupRule, host_id: str) -> str | None:
        host = self.fleet.host(host_id)
        return domain_of(rule.topology_key, host_id, {} if host is None else host.labels)

    def without(self, vm: MovableVm, host_id: str) -> PlacementGroup | None:
        """The engine's view of ``vm``'s group with ``vm`` itself taken off ``host_id``: the others'."""
        if vm.group is None:
            return None
        members = dict(self.members[vm.group.id])
        domain = self._domain(vm.group, host_id)
        if domain is not None and members.get(domain, 0) > 0:
            members[domain] -= 1
        return PlacementGroup(vm.group, {key: count for key, count in members.items() if count > 0})

    def moved(self, vm: MovableVm, source: str, target: str) -> None:
        if vm.group is None:
            return
        members = self.members[vm.group.id]
        before, after = self._domain(vm.group, source), self._domain(vm.group, target)
        if before is not None:
            members[before] -= 1
        if after is not None:
            members[after] += 1


def migration_request(
    vm: MovableVm,
    source: str,
    group: PlacementGroup | None,
    strategy: Strategy,
    *,
    target: str | None = None,
    exclude: Collection[str] = (),
) -> PlacementRequest:
    """``vm``'s move off ``source`` as the engine is asked for it (``target`` when one is named)."""
    return replace(
        vm.request,
        strategy=strategy,
        group=group,
        migration=Migration(source, target),
        exclude_hosts=vm.request.exclude_hosts | frozenset(exclude),
    )


def move_refusal(
    fleet: Fleet, vm: MovableVm, source: str, target: str, context: DecisionContext, group: PlacementGroup | None
) -> str | None:
    """Why the engine would refuse to move ``vm`` from ``source`` to ``target`` now, or None when
    every hard rule lets it."""
    source_host = fleet.host(source)
    if source_host is None or source_host.status != ONLINE:
        return f"source {source} is not online"
    if not source_host.can_migrate:
        return f"source {source} cannot migrate VMs (its agent does not declare the 'migrate' capability)"
    request = migration_request(vm, source, group, Strategy.BEST_FIT, target=target)
    found = verdict(fleet, request, context, target)
    if found is None:
        return f"no host {target}"
    return None if found.passed else found.reason


def plan_rebalance(
    fleet: Fleet,
    vms: Sequence[MovableVm],
    goal: Goal,
    context: DecisionContext,
    *,
    max_moves: int,
    hosts: Collection[str] | None = None,
    group_members: Mapping[UUID, Mapping[str, int]] | None = None,
) -> Plan:
    """Up to ``max_moves`` moves among ``hosts`` (None: every host) for ``goal``, each decided on
    ``fleet`` as the moves before it left it (the fleet is changed: pass a copy). ``group_members``:
    each server group's members per domain as the snapshot counts them (every member, moving or not);
    None: counted from ``vms``."""
    selected = None if hosts is None else frozenset(hosts)
    outside = frozenset() if selected is None else frozenset(fleet.host_ids) - selected
    placed = {vm.request.vm_id: vm.host_id for vm in vms}
    movable = [vm for vm in vms if selected is None or vm.host_id in selected]
    before = fleet_score(fleet, goal, context, selected)
    groups = _Groups(fleet, vms, placed, group_members)
    planner = _Planner(fleet, movable, placed, groups, goal, context, selected, outside)
    if goal is Goal.SPREAD:
        planner.spread(max_moves)
    else:
        planner.pack(max_moves)
    return Plan(goal, tuple(planner.moves), before, fleet_score(fleet, goal, context, selected))


class _Planner:
    def __init__(
        self,
        fleet: Fleet,
        vms: Sequence[MovableVm],
        placed: dict[str, str],
        groups: _Groups,
        goal: Goal,
        context: DecisionContext,
        selected: frozenset[str] | None,
        outside: frozenset[str],
    ) -> None:
        self.fleet, self.goal, self.context, self.selected, self.outside = fleet, goal, context, selected, outside
        self.placed = placed
        self.groups = groups
        self.on_host: dict[str, list[MovableVm]] = defaultdict(list)
        for vm in vms:
            self.on_host[vm.host_id].append(vm)
        self.moves: list[Move] = []
        self.score = fleet_score(fleet, goal, context, selected)

    def _target(self, vm: MovableVm, source: str, strategy: Strategy, exclude: Collection[str]) -> str | None:
        source_host = self.fleet.host(source)
        if source_host is None or source_host.status != ONLINE or not source_host.can_migrate:
            return None  # only an online host whose agent can migrate hands a VM over
        request = migration_request(
            vm, source, self.groups.without(vm, source), strategy, exclude=self.outside | frozenset(exclude)
        )
        return decide(self.fleet, request, self.context, fallbacks=0).host_id

    def _move(self, vm: MovableVm, source: str, target: str) -> None:
        demand = vm.request.demand
        self.fleet.release(source, demand)
        self.fleet.allocate(target, demand)
        self.groups.moved(vm, source, target)
        self.placed[vm.request.vm_id] = target
        self.on_host[source].remove(vm)
        self.on_host[target].append(vm)

    def _record(self, vm: MovableVm, source: str, target: str) -> None:
        score = fleet_score(self.fleet, self.goal, self.context, self.selected)
        gain = self.score - score
        self.score = score
        self.moves.append(Move(vm.request.vm_id, source, target, gain))

    def spread(self, max_moves: int) -> None:
        """Greedy: off the most utilised hosts, the largest VM whose move lowers the deviation most."""
        rows = _rows(self.fleet, self.selected)
        count = len(rows)
        while len(self.moves) < max_moves and count > 1:
            utilisation = _weighted_utilisation(self.fleet, self.context)
            among = utilisation[rows]
            total, squares = float(among.sum()), float(np.square(among).sum())
            best: tuple[float, MovableVm, str, str] | None = None
            for position in np.argsort(-among, kind="stable")[:SPREAD_SOURCES].tolist():
                source = self.fleet.host_at(int(rows[position])).id
                candidates = sorted(self.on_host.get(source, ()), key=lambda vm: -sum(vm.request.demand.as_tuple()[:3]))
                for vm in candidates[:SPREAD_VMS_PER_SOURCE]:
                    target = self._target(vm, source, Strategy.LEAST_UTILIZED, ())
                    if target is None:
                        continue
                    after = self._deviation_after(vm, source, target, utilisation, total, squares, count)
                    gain = math.sqrt(max(squares / count - (total / count) ** 2, 0.0)) - after
                    if gain > MIN_SPREAD_GAIN and (best is None or gain > best[0]):
                        best = (gain, vm, source, target)
                if best is not None:
                    break  # the most utilised host that can shed a VM sheds its best one
            if best is None:
                return
            _, vm, source, target = best
            self._move(vm, source, target)
            self._record(vm, source, target)

    def _deviation_after(
        self, vm: MovableVm, source: str, target: str, utilisation: FloatArray, total: float, squares: float, count: int
    ) -> float:
        """The deviation once ``vm`` moved, from the sums (two hosts change)."""
        fleet = self.fleet
        for host_id, sign in ((source, -1), (target, 1)):
            index = fleet.index_of(host_id)
            assert index is not None
            old = float(utilisation[index])
            new = old + sign * self._share(vm, index)
            total += new - old
            squares += new * new - old * old
        return math.sqrt(max(squares / count - (total / count) ** 2, 0.0))

    def _share(self, vm: MovableVm, index: int) -> float:
        weights = self.context.weights
        total = weights.cpu + weights.memory + weights.disk
        cpu, memory, disk = (weights.cpu, weights.memory, weights.disk) if total > 0 else (1.0, 1.0, 1.0)
        divisor = self.fleet.columns.divisor[:, index]
        demand = vm.request.demand
        return float(
            (
                cpu * demand.cpu / divisor[CPU]
                + memory * demand.memory_mb / divisor[MEMORY]
                + disk * demand.disk_gb / divisor[DISK]
            )
            / (cpu + memory + disk)
        )

    def pack(self, max_moves: int) -> None:
        """Greedy: empty the hosts with the fewest VMs first, each VM to the fullest host that takes it
        (never an empty host, nor one being emptied); a host that cannot be emptied whole is left as it was."""
        fleet = self.fleet
        rows = _rows(fleet, self.selected)
        sources = []
        empty: set[str] = set()
        for row in rows.tolist():
            host = fleet.host_at(int(row))
            if host.vm_count == 0:
                empty.add(host.id)
            elif host.status == ONLINE and host.can_migrate and len(self.on_host.get(host.id, ())) == host.vm_count:
                sources.append((host.vm_count, host.id))
        sources.sort()
        tries = PACK_TRIES_PER_MOVE * max_moves
        # Hosts that took a VM in this plan: emptying one later would move that VM twice (and its
        # count is no longer the one sorted on).
        filled: set[str] = set()
        for _, source in sources:
            vm_count = len(self.on_host.get(source, ()))
            if tries <= 0 or source in filled or len(self.moves) + vm_count > max_moves:
                continue
            tries -= 1
            done: list[tuple[MovableVm, str]] = []
            for vm in sorted(self.on_host[source], key=lambda vm: -sum(vm.request.demand.as_tuple()[:3])):
                target = self._target(vm, source, Strategy.BEST_FIT, empty | {source})
                if target is None:
                    break
                self._move(vm, source, target)
                done.append((vm, target))
            if len(done) < vm_count:
                for vm, target in reversed(done):
                    self._move(vm, target, source)
                continue
            empty.add(source)
            filled.update(target for _, target in done)
            score = fleet_score(fleet, self.goal, self.context, self.selected)
            for position, (vm, target) in enumerate(done, start=1):
                # The host is emptied by its last move: the gain is that move's.
                gain = score - self.score if position == len(done) else 0.0
                self.moves.append(Move(vm.request.vm_id, source, target, gain))
            self.score = score
