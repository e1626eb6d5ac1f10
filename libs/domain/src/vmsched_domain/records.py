"""The entities every service reads and changes: a VM, a host, a server group, a reservation. Plain
dataclasses (pure: no I/O); PostgreSQL's rows become these in one place, :mod:`vmsched_pg.rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from vmsched_contract.messages import (
    DEFAULT_PROJECT,
    AgentCommand,
    Capability,
    CommandAction,
    HostSelectorTerm,
    MigrationOrder,
    Overcommit,
    Resources,
    RestartPolicy,
    Taint,
    Toleration,
    VmToPlace,
)
from vmsched_contract.planner import Planner
from vmsched_contract.status import ReservationStatus, Task, VmStatus
from vmsched_contract.storage import PlacedVolume, StoragePool
from vmsched_contract.strategy import Strategy
from vmsched_domain.agent_commands import agent_command
from vmsched_domain.groups import GroupRule
from vmsched_domain.inventory import RatioOverrides


@dataclass(frozen=True, slots=True)
class VmRecord:
    id: UUID
    name: str
    status: VmStatus
    status_reason: str | None
    hypervisor_id: str | None
    resources: Resources
    labels: Mapping[str, str]
    strategy: Strategy | None
    restart_policy: RestartPolicy
    restart_count: int
    attempt: int
    failures: int
    exclusions: Mapping[str, float]  # host id -> epoch second its exclusion ends
    attempts: list[dict[str, Any]]
    placement: dict[str, Any] | None
    created_at: datetime | None
    scheduled_at: datetime | None
    started_at: datetime | None
    failed_at: datetime | None
    host_selector: tuple[HostSelectorTerm, ...] = ()  # terms a host's labels must all satisfy
    tolerations: tuple[Toleration, ...] = ()
    server_group: UUID | None = None  # the server group it is a member of
    wait_s: int = 0  # how long it may wait for room when no host fits it
    wait_until: datetime | None = None  # until when (None: it may not wait)
    gang_id: UUID | None = None  # the all-or-nothing batch it belongs to, if any
    priority: int = 0  # 0..1000: it may preempt VMs of lower priority
    preempted_by: UUID | None = None  # the VM that preempted it
    preemption: dict[str, Any] | None = None  # the preemption that moved VMs to make room for it (PreemptionMove)
    project: str = DEFAULT_PROJECT  # the project that owns it
    task: Task | None = None  # what an agent was asked for it and has not answered
    task_since: datetime | None = None
    migrations: int = 0  # migrations asked for; while migrating, the current one's number
    target_host: str | None = None  # while migrating: the host the request named (None: the engine chooses)
    migration_target: str | None = None  # while migrating: the target claimed for it (None: not yet)
    reservation: UUID | None = None  # the reservation whose held room it takes
    networks: tuple[str, ...] = ()  # the networks its host must reach
    dedicated: bool = False  # it goes only to a host dedicated to its project
    planner: Planner = Planner.FLAT  # which eligible hosts its strategy ranks
    volumes: tuple[PlacedVolume, ...] = ()  # each with its storage pool once placed

    def excluded_at(self, now: float) -> list[str]:
        """The hosts still excluded at epoch second ``now``, sorted."""
        return sorted(host for host, until in self.exclusions.items() if until > now)

    def to_place(self, now: float) -> VmToPlace:
        """What ``vm.create`` carries for this VM: its exclusions in force at ``now``."""
        return VmToPlace(
            vm_id=self.id,
            name=self.name,
            resources=self.resources,
            labels=dict(self.labels),
            host_selector=list(self.host_selector),
            tolerations=list(self.tolerations),
            strategy=self.strategy,
            exclude_hosts=self.excluded_at(now),
            attempt=self.attempt,
            server_group=self.server_group,
            gang=self.gang_id,
            priority=self.priority,
            project=self.project,
            reservation=self.reservation,
            networks=list(self.networks),
            dedicated=self.dedicated,
            planner=self.planner,
            volumes=list(self.volumes),
        )

    def command(self, action: CommandAction) -> AgentCommand:
        return agent_command(action, self.id, self.name, self.resources, attempt=self.attempt)

    def migration_command(self, action: CommandAction) -> AgentCommand:
        """A command of its current migration (its source is ``hypervisor_id``, its target the claimed one)."""
        if self.hypervisor_id is None or self.migration_target is None:
            raise ValueError(f"VM {self.id} has no migration with a target in flight")
        order = MigrationOrder(number=self.migrations, source=self.hypervisor_id, target=self.migration_target)
        return agent_command(action, self.id, self.name, self.resources, attempt=self.attempt, migration=order)


@dataclass(frozen=True, slots=True)
class HostRecord:
    id: str
    status: str
    labels: Mapping[str, str]
    capacity: Resources
    overcommit: Overcommit
    reserved: Resources
    allocated: Resources
    vm_count: int
    scheduling_paused: bool
    last_heartbeat: datetime | None
    taints: tuple[Taint, ...] = ()
    # What the operator set (labels, taints and overcommit above are the effective values).
    operator_labels: Mapping[str, str] = field(default_factory=dict)
    operator_taints: tuple[Taint, ...] | None = None
    operator_overcommit: RatioOverrides = field(default_factory=RatioOverrides)
    capabilities: tuple[str, ...] = ()  # what its agent declares it can do (messages.Capability)
    networks: tuple[str, ...] = ()  # the networks it reaches (its agent's word)
    dedicated_to: str | None = None  # the project whose VMs alone it takes (the operator's word)
    fenced_at: datetime | None = None  # declared down (docs/operations.md#fencing); None: not fenced
    fenced_by: str | None = None  # "operator" or "command"
    storage_pools: tuple[StoragePool, ...] = ()  # as its last heartbeat lists them

    def can(self, capability: Capability) -> bool:
        return capability.value in self.capabilities


@dataclass(frozen=True, slots=True)
class ServerGroupRecord:
    id: UUID
    name: str
    rule: GroupRule
    created_at: datetime | None
    project: str = DEFAULT_PROJECT
    max_unavailable: int | None = None  # its disruption budget (vmsched_domain.disruption); None: none


@dataclass(frozen=True, slots=True)
class ReservationRecord:
    id: UUID
    project: str
    status: ReservationStatus
    status_reason: str | None
    resources: Resources  # of each slot
    count: int
    host_selector: tuple[HostSelectorTerm, ...]
    placement: dict[str, Any] | None
    ends_at: datetime | None
    created_at: datetime
    updated_at: datetime
    held: int  # slots whose room is still the reservation's
    used: int  # slots a VM took
    hosts: tuple[str, ...]  # the hosts of the held and used slots
    lost: int = 0  # slots lost with their host, not placed again yet
