"""The engine's inputs made from the contract's messages: a VM of a message as a ``PlacementRequest``,
its resources as a ``Demand``. One mapping, used by the scheduler that decides and by the API that
simulates (docs/whatif.md): both must ask the same question. (A snapshot host as a ``HostState``:
:mod:`vmsched_redis.engine_inputs`.)"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from vmsched_contract import messages
from vmsched_contract.messages import Resources, VmToPlace
from vmsched_contract.storage import PlacedVolume
from vmsched_contract.strategy import Strategy
from vmsched_domain.storage import VolumeAsk
from vmsched_placement.model import (
    Demand,
    FailoverReserve,
    Migration,
    PlacementGroup,
    PlacementRequest,
    SelectorTerm,
    extras_of,
)
from vmsched_placement.taint_rules import Toleration


def host_selector_of(terms: Sequence[messages.HostSelectorTerm]) -> tuple[SelectorTerm, ...]:
    """A VM's host selector as the engine reads it."""
    return tuple(SelectorTerm(term.key, term.operator, tuple(term.values)) for term in terms)


def tolerations_of(tolerations: Sequence[messages.Toleration]) -> tuple[Toleration, ...]:
    """A VM's tolerations as the engine reads them."""
    return tuple(
        Toleration(t.key, t.operator.value, t.value, None if t.effect is None else t.effect.value) for t in tolerations
    )


def volumes_of(volumes: Sequence[PlacedVolume], *, moving: bool = False) -> tuple[VolumeAsk, ...]:
    """A VM's volumes as the engine reads them; ``moving``: a migration's, whose volumes on shared
    pools stay where they are."""
    return tuple(
        VolumeAsk(volume.size_gb, frozenset(volume.tags), volume.pool if moving and volume.shared else None)
        for volume in volumes
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
    project_pods: Mapping[str, int] | None = None,
    exclude_cluster_after: int = 0,
    reserve: FailoverReserve | None = None,
) -> PlacementRequest:
    """What the engine is asked for ``vm``: the VM as its message carries it, decided by ``strategy``,
    less the hosts it already failed on and ``exclude_hosts``; ``migration`` when it is a running VM's
    move (its source and any target asked); ``project_pods``, its project's VMs per pod, for
    ``user_concentrated``; ``exclude_cluster_after``, ``VMSCHED_EXCLUDE_CLUSTER_AFTER``."""
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
        networks=frozenset(vm.networks),
        project_pods=dict(project_pods or {}),
        project=vm.project,
        dedicated=vm.dedicated,
        planner=vm.planner,
        exclude_cluster_after=exclude_cluster_after,
        reserve=reserve,
        volumes=volumes_of(vm.volumes, moving=migration is not None),
    )
