"""The messages vmsched services and agents exchange: one pydantic model per message kind.

Every model carries ``schema_version``; consumers ignore fields they do not know, so a newer
producer can add fields without breaking older consumers.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    """A message body. Each kind states its ``schema_version``: a consumer refuses (dead-letters)
    another version of a kind rather than misreading it."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class Resources(BaseModel):
    """An amount of every resource a host offers and a VM asks for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Annotated[int, Field(ge=0, le=100_000, description="vCPUs")]
    memory_mb: Annotated[int, Field(ge=0, le=1 << 40, description="memory in MiB")]
    disk_gb: Annotated[int, Field(ge=0, le=1 << 30, description="disk in GB")]
    gpu: Annotated[int, Field(ge=0, le=1024, description="GPUs")] = 0

    def plus(self, other: Resources) -> Resources:
        # Sums of valid amounts: built without validating again.
        return Resources.model_construct(
            cpu=self.cpu + other.cpu,
            memory_mb=self.memory_mb + other.memory_mb,
            disk_gb=self.disk_gb + other.disk_gb,
            gpu=self.gpu + other.gpu,
        )


ZERO = Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=0)


class RestartPolicy(StrEnum):
    NEVER = "never"
    ON_FAILURE = "on_failure"


class UnschedulableReason(StrEnum):
    """Why no host takes a VM, when the answer is not one rule's name (``cpu``, ``labels``, ...)."""

    NO_AVAILABLE_AGENTS = "no_available_agents"  # no online host at all (seed 001's noAvailableAgents)
    INVALID_STRATEGY = "invalid_strategy"  # a strategy no scheduler implements (seed 001's invalidStrategy)


# Most VMs of a POST /v1/vms/batch travel in one vm.create; a message never carries more.
MAX_VMS_PER_MESSAGE = 1000


class VmToPlace(BaseModel):
    """One VM a scheduler is asked to place."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    vm_id: UUID
    name: str
    resources: Resources
    labels: Labels = Field(default_factory=dict)
    strategy: Strategy | None = None
    exclude_hosts: list[HostId] = Field(
        default_factory=list, description="hosts that failed this VM lately (they expire after EXCLUDE_FOR)"
    )
    attempt: Annotated[int, Field(ge=1)] = 1
    gang: UUID | None = Field(
        default=None, description="the all-or-nothing batch it belongs to: its VMs are placed together or not at all"
    )


class VmCreate(Message):
    """``vm.create``: the API (or a retry) asks a scheduler to place VMs: every VM of one request
    (one for ``POST /v1/vms``, up to 1,000 for ``POST /v1/vms/batch``) in one message."""

    schema_version: Literal[2] = 2
    vms: Annotated[list[VmToPlace], Field(min_length=1, max_length=MAX_VMS_PER_MESSAGE)]


class Assignment(BaseModel):
    """One VM placed on a host; PostgreSQL already says so."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    vm_id: UUID
    name: str
    hypervisor_id: HostId
    resources: Resources
    strategy: Strategy
    attempt: int
    scheduled_at: datetime


class VmAssigned(Message):
    """``vm.assigned``: a scheduler placed VMs (those of one ``vm.create`` that found a host)."""

    schema_version: Literal[2] = 2
    assignments: Annotated[list[Assignment], Field(min_length=1, max_length=MAX_VMS_PER_MESSAGE)]


class Unplaced(BaseModel):
    """One VM no host could take, and why."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    vm_id: UUID
    attempt: int
    reason: str = Field(
        description="no_available_agents, invalid_strategy, or the rule that rejected the most hosts "
        "(cpu, memory, disk, gpu, labels, paused, offline, excluded, ...)"
    )
    detail: str
    rejections: dict[str, int] = Field(
        default_factory=dict, description="hosts rejected, by the first rule they failed"
    )


class VmUnschedulable(Message):
    """``vm.unschedulable``: no host could take these VMs (those of one ``vm.create``)."""

    schema_version: Literal[2] = 2
    vms: Annotated[list[Unplaced], Field(min_length=1, max_length=MAX_VMS_PER_MESSAGE)]


class WaitingVm(Unplaced):
    """One VM no host can take yet, waiting for room until ``wait_until``."""

    wait_until: datetime = Field(description="when it ends unschedulable if no room appears before")


class VmWaiting(Message):
    """``vm.waiting``: no host can take these VMs yet (those of one ``vm.create``); each waits for
    room until its ``wait_until``, and is placed (``vm.assigned``) or ends ``vm.unschedulable``."""

    schema_version: Literal[1] = 1
    vms: Annotated[list[WaitingVm], Field(min_length=1, max_length=MAX_VMS_PER_MESSAGE)]


class HostStatus(StrEnum):
    ONLINE = "online"
    DRAINING = "draining"
    OFFLINE = "offline"


class Overcommit(BaseModel):
    """Allocation ratios, as Nova's cpu_allocation_ratio / ram_allocation_ratio / disk_allocation_ratio
    (GPUs are never overcommitted; see vmsched_common.fit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Below 1 holds part of the host back (as Nova allows); above 1 overcommits.
    cpu: Annotated[float, Field(gt=0.0, le=64.0)] = 1.0
    memory: Annotated[float, Field(gt=0.0, le=64.0)] = 1.0
    disk: Annotated[float, Field(gt=0.0, le=64.0)] = 1.0


class Usage(BaseModel):
    """What a host measurably uses now, as its agent measures it: the whole host (its VMs and the
    hypervisor itself), not what was allocated on it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cpu_used: Annotated[float, Field(ge=0.0, le=100_000.0, description="cores busy, e.g. 12.5 of 64")]
    memory_used_mb: Annotated[int, Field(ge=0, le=1 << 40, description="memory in use, MiB")]


class AgentHeartbeat(Message):
    """``agent.heartbeat``: an agent says it is alive and what it offers."""

    schema_version: Literal[1] = 1
    agent_id: HostId
    capacity: Resources
    labels: Labels = Field(default_factory=dict)
    status: Literal[HostStatus.ONLINE, HostStatus.DRAINING] = HostStatus.ONLINE
    vm_ids: list[UUID] = Field(default_factory=list)
    overcommit: Overcommit = Field(default_factory=Overcommit)
    usage: Usage | None = Field(
        default=None, description="measured load, for the least_utilized strategy; absent: ranked by allocation"
    )
    sent_at: datetime = Field(default_factory=utc_now)


class CommandAction(StrEnum):
    CREATE = "create"
    DELETE = "delete"


class AgentCommand(Message):
    """What the gateway (or the API, for deletes) puts on ``agent.<host id>``."""

    schema_version: Literal[1] = 1
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

    schema_version: Literal[1] = 1
    vm_id: UUID
    agent_id: HostId
    status: ReportedStatus
    message: str = ""
    attempt: int | None = None


class VmDeleted(Message):
    """``vm.deleted``: the agent removed the VM and its capacity is free again."""

    schema_version: Literal[1] = 1
    vm_id: UUID
    hypervisor_id: HostId | None = None


class OrphanKind(StrEnum):
    MOVED = "moved"  # vmsched holds the VM on another host now (or is placing it again)
    GONE = "gone"  # vmsched holds it nowhere: deleted, failed or unschedulable


class VmOrphaned(Message):
    """``vm.orphaned``: an agent runs a VM vmsched does not hold on that host (the host was cut off
    and came back, or a stale command re-created it)."""

    schema_version: Literal[1] = 1
    vm_id: UUID
    host_id: HostId = Field(description="the host whose agent runs it")
    kind: OrphanKind
    status: str = Field(description="the VM's status in vmsched")
    held_on: HostId | None = Field(default=None, description="the host vmsched holds it on, if any")
    deleted: bool = Field(description="whether the agent was told to delete it (VMSCHED_ORPHAN_VMS)")


def batch_message_id(kind: str, vms: Sequence[tuple[UUID, int]]) -> str:
    """``<first vm id>:<kind>:<its attempt>`` and ``+<n>`` for the n more VMs the message carries:
    deterministic, so a message sent again for the same VMs is recognisably the same one."""
    (first, attempt), more = vms[0], len(vms) - 1
    return f"{first}:{kind}:{attempt}" + (f"+{more}" if more else "")


def command_message_id(vm_id: UUID, action: CommandAction, attempt: int) -> str:
    return f"{vm_id}:{action.value}-command:{attempt}"
