"""One row shape per table: what every service reads of a VM or a host, mapped from a row in one place.

Statements select :data:`VM_COLUMNS` (or ``vms.*``) and :data:`HOST_COLUMNS`, and turn each row into
a :class:`VmRecord` or :class:`HostRecord` with ``from_row``; nothing else reads the columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from vmsched_common.db.inventory import RatioOverrides, taints_of, tolerations_of
from vmsched_common.groups import GroupPolicy, GroupRule
from vmsched_common.lifecycle import Task, VmStatus
from vmsched_common.messages import (
    DEFAULT_PROJECT,
    AgentCommand,
    Capability,
    CommandAction,
    HostSelectorTerm,
    MigrationOrder,
    Overcommit,
    Resources,
    RestartPolicy,
    SelectorOperator,
    Taint,
    Toleration,
    VmToPlace,
)
from vmsched_common.settings import Strategy

VM_FIELDS = (
    "id",
    "name",
    "status",
    "status_reason",
    "hypervisor_id",
    "cpu",
    "memory_mb",
    "disk_gb",
    "gpu",
    "extra",
    "labels",
    "host_selector",
    "tolerations",
    "strategy",
    "restart_policy",
    "restart_count",
    "attempt",
    "failures",
    "exclusions",
    "attempts",
    "placement",
    "created_at",
    "scheduled_at",
    "started_at",
    "failed_at",
    "server_group",
    "wait_s",
    "wait_until",
    "gang_id",
    "priority",
    "preempted_by",
    "project",
    "task",
    "task_since",
    "migrations",
    "target_host",
    "migration_target",
    "reservation",
)
VM_COLUMNS = ", ".join(VM_FIELDS)

HOST_FIELDS = (
    "id",
    "status",
    "labels",
    "cpu",
    "memory_mb",
    "disk_gb",
    "gpu",
    "extra",
    "cpu_ratio",
    "memory_ratio",
    "disk_ratio",
    "reserved_cpu",
    "reserved_memory_mb",
    "reserved_disk_gb",
    "reserved_gpu",
    "alloc_cpu",
    "alloc_memory_mb",
    "alloc_disk_gb",
    "alloc_gpu",
    "alloc_extra",
    "vm_count",
    "scheduling_paused",
    "last_heartbeat",
    "taints",
    "operator_labels",
    "operator_taints",
    "operator_cpu_ratio",
    "operator_memory_ratio",
    "operator_disk_ratio",
    "capabilities",
)
HOST_COLUMNS = ", ".join(HOST_FIELDS)

SERVER_GROUP_FIELDS = ("id", "name", "policy", "topology_key", "max_per_domain", "max_skew", "created_at", "project")
SERVER_GROUP_COLUMNS = ", ".join(SERVER_GROUP_FIELDS)


def trusted(cpu: int, memory_mb: int, disk_gb: int, gpu: int, extra: Mapping[str, int] | None = None) -> Resources:
    """Amounts read back from a column that only validated values reach: built without validating
    again (a few microseconds a row, which a page of 1,000 VMs notices)."""
    return Resources.model_construct(cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb, gpu=gpu, extra=dict(extra or {}))


def trusted_selector(terms: list[dict[str, Any]] | None) -> tuple[HostSelectorTerm, ...]:
    """A host selector read back from its column (only validated terms reach it), built as ``trusted``
    builds amounts."""
    return tuple(
        HostSelectorTerm.model_construct(
            key=term["key"], operator=SelectorOperator(term["operator"]), values=list(term.get("values", []))
        )
        for term in terms or ()
    )


def columns(fields: tuple[str, ...], table: str) -> str:
    """``t.a, t.b, ...``: the columns qualified by a table name or alias (for joins)."""
    return ", ".join(f"{table}.{name}" for name in fields)


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
    project: str = DEFAULT_PROJECT  # the project that owns it
    task: Task | None = None  # what an agent was asked for it and has not answered
    task_since: datetime | None = None
    migrations: int = 0  # migrations asked for; while migrating, the current one's number
    target_host: str | None = None  # while migrating: the host the request named (None: the engine chooses)
    migration_target: str | None = None  # while migrating: the target claimed for it (None: not yet)
    reservation: UUID | None = None  # the reservation whose held room it takes

    @classmethod
    def from_row(cls, row: Any) -> VmRecord:
        return cls(
            id=row.id,
            name=row.name,
            status=VmStatus(row.status),
            status_reason=row.status_reason,
            hypervisor_id=row.hypervisor_id,
            resources=trusted(row.cpu, row.memory_mb, row.disk_gb, row.gpu, row.extra),
            labels=dict(row.labels or {}),
            host_selector=trusted_selector(row.host_selector),
            tolerations=tolerations_of(row.tolerations),
            strategy=Strategy(row.strategy) if row.strategy else None,
            restart_policy=RestartPolicy(row.restart_policy),
            restart_count=row.restart_count,
            attempt=row.attempt,
            failures=row.failures,
            exclusions=dict(row.exclusions or {}),
            attempts=list(row.attempts or []),
            placement=row.placement,
            created_at=row.created_at,
            scheduled_at=row.scheduled_at,
            started_at=row.started_at,
            failed_at=row.failed_at,
            server_group=row.server_group,
            wait_s=row.wait_s,
            wait_until=row.wait_until,
            gang_id=row.gang_id,
            priority=row.priority,
            preempted_by=row.preempted_by,
            project=row.project,
            task=Task(row.task) if row.task else None,
            task_since=row.task_since,
            migrations=row.migrations,
            target_host=row.target_host,
            migration_target=row.migration_target,
            reservation=row.reservation,
        )

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
        )

    def command(self, action: CommandAction) -> AgentCommand:
        return AgentCommand(
            action=action, vm_id=self.id, name=self.name, resources=self.resources, attempt=self.attempt
        )

    def migration_command(self, action: CommandAction) -> AgentCommand:
        """A command of its current migration (its source is ``hypervisor_id``, its target the claimed one)."""
        if self.hypervisor_id is None or self.migration_target is None:
            raise ValueError(f"VM {self.id} has no migration with a target in flight")
        order = MigrationOrder(number=self.migrations, source=self.hypervisor_id, target=self.migration_target)
        return self.command(action).model_copy(update={"migration": order})


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

    def can(self, capability: Capability) -> bool:
        return capability.value in self.capabilities

    @classmethod
    def from_row(cls, row: Any) -> HostRecord:
        return cls(
            id=row.id,
            status=row.status,
            labels=dict(row.labels or {}),
            capacity=trusted(row.cpu, row.memory_mb, row.disk_gb, row.gpu, row.extra),
            overcommit=Overcommit.model_construct(cpu=row.cpu_ratio, memory=row.memory_ratio, disk=row.disk_ratio),
            reserved=trusted(row.reserved_cpu, row.reserved_memory_mb, row.reserved_disk_gb, row.reserved_gpu),
            allocated=trusted(row.alloc_cpu, row.alloc_memory_mb, row.alloc_disk_gb, row.alloc_gpu, row.alloc_extra),
            vm_count=row.vm_count,
            scheduling_paused=row.scheduling_paused,
            last_heartbeat=row.last_heartbeat,
            taints=taints_of(row.taints) or (),
            operator_labels=dict(row.operator_labels or {}),
            operator_taints=taints_of(row.operator_taints),
            operator_overcommit=RatioOverrides.of_row(row),
            capabilities=tuple(row.capabilities or ()),
        )


@dataclass(frozen=True, slots=True)
class ServerGroupRecord:
    id: UUID
    name: str
    rule: GroupRule
    created_at: datetime | None
    project: str = DEFAULT_PROJECT

    @classmethod
    def from_row(cls, row: Any) -> ServerGroupRecord:
        return cls(
            id=row.id,
            name=row.name,
            rule=GroupRule(
                id=row.id,
                policy=GroupPolicy(row.policy),
                topology_key=row.topology_key,
                max_per_domain=row.max_per_domain,
                max_skew=row.max_skew,
            ),
            created_at=row.created_at,
            project=row.project,
        )
