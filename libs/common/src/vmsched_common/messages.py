"""The messages vmsched services and agents exchange: one pydantic model per message kind.

Every model carries ``schema_version``; consumers ignore fields they do not know, so a newer
producer can add fields without breaking older consumers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from vmsched_common.settings import Strategy

HostId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=63)]
LabelValue = Annotated[str, StringConstraints(max_length=255)]
Labels = dict[LabelKey, LabelValue]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = 1


class Resources(BaseModel):
    """An amount of every resource a host offers and a VM asks for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Annotated[int, Field(ge=0, le=100_000, description="vCPUs")]
    memory_mb: Annotated[int, Field(ge=0, le=1 << 40, description="memory in MiB")]
    disk_gb: Annotated[int, Field(ge=0, le=1 << 30, description="disk in GB")]
    gpu: Annotated[int, Field(ge=0, le=1024, description="GPUs")] = 0

    def plus(self, other: Resources) -> Resources:
        return Resources(
            cpu=self.cpu + other.cpu,
            memory_mb=self.memory_mb + other.memory_mb,
            disk_gb=self.disk_gb + other.disk_gb,
            gpu=self.gpu + other.gpu,
        )


ZERO = Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=0)


class VmStatus(StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    FAILED = "failed"
    UNSCHEDULABLE = "unschedulable"
    DELETING = "deleting"
    DELETED = "deleted"


# A VM in one of these holds capacity on its host.
ALLOCATING_STATUSES = frozenset({VmStatus.SCHEDULED, VmStatus.RUNNING, VmStatus.DELETING})
FINAL_STATUSES = frozenset(
    {VmStatus.SCHEDULED, VmStatus.RUNNING, VmStatus.FAILED, VmStatus.UNSCHEDULABLE, VmStatus.DELETED}
)


class RestartPolicy(StrEnum):
    NEVER = "never"
    ON_FAILURE = "on_failure"


class UnschedulableReason(StrEnum):
    NO_AVAILABLE_AGENTS = "no_available_agents"
    INSUFFICIENT_RESOURCES = "insufficient_resources"
    INVALID_STRATEGY = "invalid_strategy"


class VmCreate(Message):
    """``vm.create``: the API (or a retry) asks a scheduler to place a VM."""

    vm_id: UUID
    name: str
    resources: Resources
    labels: Labels = Field(default_factory=dict)
    strategy: Strategy | None = None
    exclude_hosts: list[HostId] = Field(default_factory=list)
    attempt: Annotated[int, Field(ge=1)] = 1


class VmAssigned(Message):
    """``vm.assigned``: a scheduler placed a VM on a host; PostgreSQL already says so."""

    vm_id: UUID
    name: str
    hypervisor_id: HostId
    resources: Resources
    strategy: Strategy
    attempt: int
    scheduled_at: datetime


class VmUnschedulable(Message):
    """``vm.unschedulable``: no host could take the VM."""

    vm_id: UUID
    reason: UnschedulableReason
    detail: str
    rejections: dict[str, int] = Field(default_factory=dict)


class HostStatus(StrEnum):
    ONLINE = "online"
    DRAINING = "draining"
    OFFLINE = "offline"


class Overcommit(BaseModel):
    """Allocation ratios, as Nova's cpu_allocation_ratio / ram_allocation_ratio."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Annotated[float, Field(ge=1.0, le=64.0)] = 1.0
    memory: Annotated[float, Field(ge=1.0, le=64.0)] = 1.0


class AgentHeartbeat(Message):
    """``agent.heartbeat``: an agent says it is alive and what it offers."""

    agent_id: HostId
    capacity: Resources
    labels: Labels = Field(default_factory=dict)
    status: Literal[HostStatus.ONLINE, HostStatus.DRAINING] = HostStatus.ONLINE
    vm_ids: list[UUID] = Field(default_factory=list)
    overcommit: Overcommit = Field(default_factory=Overcommit)
    sent_at: datetime = Field(default_factory=utc_now)


class CommandAction(StrEnum):
    CREATE = "create"
    DELETE = "delete"


class AgentCommand(Message):
    """What the gateway (or the API, for deletes) puts on ``agent.<host id>``."""

    action: CommandAction
    vm_id: UUID
    name: str
    resources: Resources
    attempt: int = 1


class ReportedStatus(StrEnum):
    RUNNING = "running"
    FAILED = "failed"
    DELETED = "deleted"


class VmStatusReport(Message):
    """``vm.status``: an agent reports what became of a command."""

    vm_id: UUID
    agent_id: HostId
    status: ReportedStatus
    message: str = ""
    attempt: int | None = None


class VmDeleted(Message):
    """``vm.deleted``: the agent removed the VM and its capacity is free again."""

    vm_id: UUID
    hypervisor_id: HostId | None = None


def assigned_message_id(vm_id: UUID, attempt: int) -> str:
    """Deterministic, so a re-published assignment is recognisably the same event."""
    return f"{vm_id}:assigned:{attempt}"


def create_message_id(vm_id: UUID, attempt: int) -> str:
    return f"{vm_id}:create:{attempt}"


def command_message_id(vm_id: UUID, action: CommandAction, attempt: int) -> str:
    return f"{vm_id}:{action.value}-command:{attempt}"
