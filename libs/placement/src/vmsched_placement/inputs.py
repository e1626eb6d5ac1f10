"""The engine's inputs made from what the services hold: a snapshot host as a ``HostState``, a VM of
a message as a ``PlacementRequest``. One mapping, used by the scheduler that decides and by the API
that simulates (docs/whatif.md): both must see the same fleet and ask the same question."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vmsched_common import messages
from vmsched_common.messages import Capability, Resources, VmToPlace
from vmsched_common.settings import Strategy
from vmsched_common.snapshot import MeasuredUsage, SnapshotHost
from vmsched_placement.model import (
    Demand,
    HostState,
    HostUsage,
    Migration,
    PlacementGroup,
    PlacementRequest,
    SelectorTerm,
    extras_of,
)
from vmsched_placement.taint_rules import Taint, Toleration


def to_host_state(record: SnapshotHost) -> HostState:
    return HostState(
        id=record.id,
        # A hash without allocations (a flush, then a heartbeat before reconciliation) cannot be
        # claimed on: not "online" to the engine either, so it is not chosen in vain.
        status=record.status if record.synced else "unsynced",
        labels=dict(record.labels),
        capacity=demand_of(record.capacity),
        allocated=demand_of(record.allocated),
        reserved=demand_of(record.reserved),
        vm_count=record.vm_count,
        scheduling_paused=record.scheduling_paused,
        last_heartbeat=record.last_heartbeat,
        cpu_ratio=record.overcommit.cpu,
        memory_ratio=record.overcommit.memory,
        disk_ratio=record.overcommit.disk,
        usage=usage_of(record.usage),
        taints=tuple(Taint(t.key, t.value, t.effect.value) for t in record.taints),
        can_migrate=Capability.MIGRATE.value in record.capabilities,
    )


def usage_of(measured: MeasuredUsage | None) -> HostUsage | None:
    if measured is None:
        return None
    return HostUsage(
        cpu_used=measured.cpu_used,
        memory_used_mb=float(measured.memory_used_mb),
        allocated_cpu=measured.allocated_cpu,
        allocated_memory_mb=measured.allocated_memory_mb,
    )


def host_selector_of(terms: Sequence[messages.HostSelectorTerm]) -> tuple[SelectorTerm, ...]:
    """A VM's host selector as the engine reads it."""
    return tuple(SelectorTerm(term.key, term.operator, tuple(term.values)) for term in terms)


def tolerations_of(tolerations: Sequence[messages.Toleration]) -> tuple[Toleration, ...]:
    """A VM's tolerations as the engine reads them."""
    return tuple(
        Toleration(t.key, t.operator.value, t.value, None if t.effect is None else t.effect.value) for t in tolerations
    )


def demand_of(resources: Resources) -> Demand:
    return Demand(
        cpu=resources.cpu,
        memory_mb=resources.memory_mb,
        disk_gb=resources.disk_gb,
        gpu=resources.gpu,
        extra=extras_of(resources.extra) if resources.extra else (),
    )


def placement_request(
    vm: VmToPlace,
    strategy: Strategy,
    *,
    exclude_hosts: Iterable[str] = (),
    group: PlacementGroup | None = None,
    migration: Migration | None = None,
) -> PlacementRequest:
    """What the engine is asked for ``vm``: the VM as its message carries it, decided by ``strategy``,
    less the hosts it already failed on and ``exclude_hosts``; ``migration`` when it is a running VM's
    move (its source and any target asked)."""
    return PlacementRequest(
        vm_id=str(vm.vm_id),
        name=vm.name,
        demand=demand_of(vm.resources),
        labels=vm.labels,
        strategy=strategy,
        exclude_hosts=frozenset(vm.exclude_hosts) | frozenset(exclude_hosts),
        host_selector=host_selector_of(vm.host_selector),
        tolerations=tolerations_of(vm.tolerations),
        group=group,
        migration=migration,
    )
