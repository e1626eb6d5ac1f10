"""The plain values the placement engine reads: hosts, demands, requests and the decision context.

Everything here is a frozen dataclass: cheap to build, safe to share between decisions.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from vmsched_contract.messages import SelectorOperator, add_counts
from vmsched_contract.planner import Planner
from vmsched_contract.strategy import Strategy
from vmsched_domain.fit import RESOURCES, allocatable, ratio_of
from vmsched_domain.groups import GroupRule
from vmsched_domain.ha_reserve import Amounts
from vmsched_domain.storage import PoolRoom, VolumeAsk
from vmsched_domain.usage import MeasuredUsage
from vmsched_placement.taint_rules import Taint, Toleration

# Rows of the fleet's (4, n) resource columns: the order of the fit rule's RESOURCES.
CPU, MEMORY, DISK, GPU = 0, 1, 2, 3

ONLINE = "online"


# Named extra resources (``(("fpga", 2),)``): sorted by name, no zero counts. Most hosts and VMs
# have none, and an empty tuple costs nothing to add or compare.
Extras = tuple[tuple[str, int], ...]


def extras_of(counts: Mapping[str, int]) -> Extras:
    """The canonical form of a ``{name: count}`` map."""
    if not counts:
        return ()
    return tuple(sorted((name, int(count)) for name, count in counts.items() if count))


def _combined(mine: Extras, theirs: Extras, sign: int) -> Extras:
    if not theirs:
        return mine
    return extras_of(add_counts(dict(mine), dict(theirs), sign, floored=True))


@dataclass(frozen=True, slots=True)
class Demand:
    """An amount of every resource: what a VM asks for, or what a host has or has handed out."""

    cpu: int
    memory_mb: int
    disk_gb: int
    gpu: int = 0
    extra: Extras = ()  # named extra resources, outside the fixed (cpu, memory, disk, gpu) rows

    def plus(self, other: Demand) -> Demand:
        return Demand(
            self.cpu + other.cpu,
            self.memory_mb + other.memory_mb,
            self.disk_gb + other.disk_gb,
            self.gpu + other.gpu,
            _combined(self.extra, other.extra, 1),
        )

    def minus_floored(self, other: Demand) -> Demand:
        """``self - other``, never below zero (a release can not free more than was allocated)."""
        return Demand(
            max(0, self.cpu - other.cpu),
            max(0, self.memory_mb - other.memory_mb),
            max(0, self.disk_gb - other.disk_gb),
            max(0, self.gpu - other.gpu),
            _combined(self.extra, other.extra, -1),
        )

    def as_tuple(self) -> tuple[int, int, int, int]:
        """The amounts in row order (cpu, memory, disk, gpu)."""
        return (self.cpu, self.memory_mb, self.disk_gb, self.gpu)


NO_DEMAND = Demand(0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class Ratios:
    """Allocation (overcommit) ratios of the resources that have one (the fit rule's ``Ratios``)."""

    cpu: float = 1.0
    memory: float = 1.0
    disk: float = 1.0


@dataclass(frozen=True, slots=True)
class HostState:
    """One host as the capacity snapshot knows it."""

    id: str
    status: str  # "online" | "draining" | "offline" (anything but "online" is not schedulable)
    labels: Mapping[str, str]
    capacity: Demand
    allocated: Demand
    vm_count: int
    scheduling_paused: bool
    last_heartbeat: float  # epoch seconds
    cpu_ratio: float = 1.0  # overcommit (allocation ratio) for cpu
    memory_ratio: float = 1.0  # overcommit (allocation ratio) for memory
    disk_ratio: float = 1.0  # overcommit (allocation ratio) for disk
    reserved: Demand = NO_DEMAND  # held back for the hypervisor itself
    usage: MeasuredUsage | None = None  # measured by its agent; None when it reports none
    taints: tuple[Taint, ...] = ()
    can_migrate: bool = False  # its agent declares the "migrate" capability
    networks: frozenset[str] = frozenset()  # the networks it reaches (its agent's heartbeat)
    dedicated_to: str | None = None  # the project whose VMs alone it takes (the operator's)
    # The storage pools it reaches: local ones with their numbers; shared ones by name (the fleet
    # holds their capacity, tags and allocation, counted once for every host).
    storage_pools: tuple[PoolRoom, ...] = ()

    @property
    def ratios(self) -> Ratios:
        return Ratios(self.cpu_ratio, self.memory_ratio, self.disk_ratio)

    @property
    def effective_capacity(self) -> Demand:
        """What may be handed out of each resource: the fit rule's ``allocatable`` (after reserved
        capacity and overcommit; GPUs and extras are never overcommitted)."""
        ratios = self.ratios
        cpu, memory_mb, disk_gb, gpu = (
            allocatable(getattr(self.capacity, rule.field), getattr(self.reserved, rule.field), ratio_of(rule, ratios))
            for rule in RESOURCES
        )
        # Extras are never overcommitted and nothing of them is reserved (fit.extra_shortfall).
        return Demand(cpu, memory_mb, disk_gb, gpu, self.capacity.extra)

    @property
    def measured_load(self) -> tuple[float, float] | None:
        """cpu and memory in use (:meth:`~vmsched_domain.usage.MeasuredUsage.in_use`) as shares of the host's physical
        capacity (at least 1 of each); None when its agent reports no usage."""
        if self.usage is None:
            return None
        cpu, memory = self.usage.in_use(self.allocated.cpu, self.allocated.memory_mb)
        return cpu / float(max(self.capacity.cpu, 1)), memory / float(max(self.capacity.memory_mb, 1))

    @property
    def free(self) -> Demand:
        """Effective capacity minus allocations; negative where a host is over its (lowered) capacity
        (named extras: what is left of each, those with none left not named)."""
        effective = self.effective_capacity
        return Demand(
            effective.cpu - self.allocated.cpu,
            effective.memory_mb - self.allocated.memory_mb,
            effective.disk_gb - self.allocated.disk_gb,
            effective.gpu - self.allocated.gpu,
            _combined(effective.extra, self.allocated.extra, -1),
        )


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One term of a host selector: the host's label ``key`` tested by ``operator`` against ``values``
    (``vmsched_contract.messages.HostSelectorTerm``, validated)."""

    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PlacementGroup:
    """The server group a VM joins: its rule, and its members per domain as known at this decision
    (the snapshot's count at the start of the round, plus the round's own choices so far)."""

    rule: GroupRule
    members: Mapping[str, int]  # domain -> members there (absent: none)


@dataclass(frozen=True, slots=True)
class FailoverReserve:
    """HA capacity (VMSCHED_HA_RESERVE_HOSTS, :mod:`vmsched_domain.ha_reserve`): each zone's failover
    headroom as known at this decision (PostgreSQL's at the start of the round, less the round's own
    choices so far). A zone absent has no headroom."""

    reserve_hosts: int
    headroom: Mapping[str, Amounts]


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """One VM to place."""

    vm_id: str
    name: str
    demand: Demand
    labels: Mapping[str, str]
    strategy: Strategy
    exclude_hosts: frozenset[str] = frozenset()  # hosts that already failed this VM (CloudStack's ExcludeList)
    host_selector: tuple[SelectorTerm, ...] = ()  # every term must hold (Kubernetes' node affinity)
    tolerations: tuple[Toleration, ...] = ()
    group: PlacementGroup | None = None  # its server group, if it joins one
    migration: Migration | None = None  # set when choosing the target of a migration
    networks: frozenset[str] = frozenset()  # every one must be reached by its host
    # Its project's VMs per pod (the hosts' ``pod`` label) at this decision: what ``user_concentrated``
    # ranks by; empty for the other strategies (the scheduler counts them only for that one).
    project_pods: Mapping[str, int] = field(default_factory=dict)
    project: str = ""  # the project that owns it: a dedicated host takes only its project's VMs
    dedicated: bool = False  # it goes only to a host dedicated to its project
    planner: Planner = Planner.FLAT  # which eligible hosts the strategy ranks (planners.py)
    # VMSCHED_EXCLUDE_CLUSTER_AFTER: a cluster holding this many of ``exclude_hosts`` is left out
    # whole (0: never); the hosts left out are those that failed the VM (and a migration's source).
    exclude_cluster_after: int = 0
    reserve: FailoverReserve | None = None  # set when VMSCHED_HA_RESERVE_HOSTS keeps room for failures
    volumes: tuple[VolumeAsk, ...] = ()  # each to one pool the host reaches (vmsched_domain.storage)


@dataclass(frozen=True, slots=True)
class Migration:
    """A running VM to move: only a host that can migrate may take it (its source is excluded), and
    only ``target_host`` when one is named."""

    source: str
    target_host: str | None = None


@dataclass(frozen=True, slots=True)
class Weights:
    """How much each resource's share counts in ``least_loaded``, ``least_utilized`` and ``best_fit`` scores."""

    cpu: float = 0.4
    memory: float = 0.4
    disk: float = 0.2

    def __post_init__(self) -> None:
        for name in ("cpu", "memory", "disk"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"weight {name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class DecisionContext:
    """Everything a decision needs from outside the engine: time, settings, randomness, the shared cursor."""

    now: float  # epoch seconds
    offline_timeout: float  # VMSCHED_AGENT_OFFLINE_TIMEOUT, seconds
    weights: Weights
    rng: random.Random  # the only randomness the engine uses (strategy ``random``)
    round_robin_cursor: int = 0  # the shared counter's value for this decision (Redis INCR)


@dataclass(frozen=True, slots=True)
class RequestVector:
    """A request reduced to what filters and scorers read, built once per decision."""

    cpu: int
    memory_mb: int
    disk_gb: int
    gpu: int
    labels: tuple[tuple[str, str], ...]  # sorted (key, value) pairs the host must carry
    exclude_hosts: frozenset[str]
    now: float
    offline_timeout: float
    host_selector: tuple[SelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    group: PlacementGroup | None = None
    extra: Extras = ()  # named extra resources asked for
    migration: Migration | None = None
    networks: frozenset[str] = frozenset()
    project_pods: Mapping[str, int] = field(default_factory=dict)
    project: str = ""
    dedicated: bool = False
    exclude_cluster_after: int = 0
    reserve: FailoverReserve | None = None
    volumes: tuple[VolumeAsk, ...] = ()

    @classmethod
    def of(cls, request: PlacementRequest, context: DecisionContext) -> RequestVector:
        demand = request.demand
        return cls(
            cpu=demand.cpu,
            memory_mb=demand.memory_mb,
            disk_gb=demand.disk_gb,
            gpu=demand.gpu,
            labels=tuple(sorted(request.labels.items())),
            exclude_hosts=request.exclude_hosts,
            now=context.now,
            offline_timeout=context.offline_timeout,
            host_selector=request.host_selector,
            tolerations=request.tolerations,
            group=request.group,
            extra=demand.extra,
            migration=request.migration,
            networks=request.networks,
            project_pods=request.project_pods,
            project=request.project,
            dedicated=request.dedicated,
            exclude_cluster_after=request.exclude_cluster_after,
            reserve=request.reserve,
            volumes=request.volumes,
        )

    def demanded(self, resource: int) -> int:
        """The amount of one resource row (``CPU``, ``MEMORY``, ``DISK``, ``GPU``)."""
        return (self.cpu, self.memory_mb, self.disk_gb, self.gpu)[resource]
