"""The HTTP API's request and response bodies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from vmsched_common.decision import PlacementRecord
from vmsched_common.lifecycle import VmStatus
from vmsched_common.messages import HostStatus, Labels, Overcommit, Resources, RestartPolicy
from vmsched_common.settings import MAX_WAIT_S, Settings, Strategy

VmName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"),
    Field(description="letters, digits, '.', '_' and '-', starting with a letter or digit"),
]


@dataclass(frozen=True, slots=True)
class VmDefaults:
    """What a VM request that omits ``cpu`` or ``memory_mb`` gets."""

    cpu: int
    memory_mb: int
    wait_s: int = 0

    @classmethod
    def of(cls, settings: Settings) -> VmDefaults:
        """``VMSCHED_DEFAULT_VM_CPU``, ``VMSCHED_DEFAULT_VM_MEMORY_MB`` and ``VMSCHED_DEFAULT_WAIT_S``."""
        return cls(cpu=settings.default_vm_cpu, memory_mb=settings.default_vm_memory_mb, wait_s=settings.default_wait_s)


class VmRequest(BaseModel):
    """What a client asks for."""

    model_config = ConfigDict(extra="forbid")

    name: VmName
    cpu: int | None = Field(default=None, ge=1, le=1024, description="vCPUs; omitted: VMSCHED_DEFAULT_VM_CPU")
    memory_mb: int | None = Field(
        default=None, ge=1, le=64 * 1024 * 1024, description="memory in MiB; omitted: VMSCHED_DEFAULT_VM_MEMORY_MB"
    )
    disk_gb: Annotated[int, Field(ge=0, le=1024 * 1024, description="disk in GB")]
    gpu: Annotated[int, Field(ge=0, le=64)] = 0
    labels: Labels = Field(default_factory=dict, description="the host's labels must contain all of these")
    strategy: Strategy | None = Field(default=None, description="overrides the cluster default for this VM")
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    wait_s: int | None = Field(
        default=None,
        ge=0,
        le=MAX_WAIT_S,
        description="seconds the VM may wait (status waiting) for room when no host fits it, placed oldest "
        "first as soon as capacity appears, then unschedulable with the last reason; 0: unschedulable at once; "
        "omitted: VMSCHED_DEFAULT_WAIT_S",
    )

    def waits(self, defaults: VmDefaults) -> int:
        """How long the VM may wait for room: what it asks, else the default."""
        return defaults.wait_s if self.wait_s is None else self.wait_s

    def resources(self, defaults: VmDefaults) -> Resources:
        """What the VM gets: what it asks for, ``defaults`` for what it leaves out."""
        return Resources(
            cpu=defaults.cpu if self.cpu is None else self.cpu,
            memory_mb=defaults.memory_mb if self.memory_mb is None else self.memory_mb,
            disk_gb=self.disk_gb,
            gpu=self.gpu,
        )


class VmBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vms: Annotated[list[VmRequest], Field(min_length=1, max_length=1000)]
    all_or_nothing: bool = Field(
        default=False,
        description="place every VM of the batch or none (gang scheduling): if they do not all fit at once, "
        "every one ends unschedulable and no capacity is held. Its VMs may not wait for room (wait_s > 0 is "
        "refused with 422; VMSCHED_DEFAULT_WAIT_S does not apply to them)",
    )

    @model_validator(mode="after")
    def _a_gang_does_not_wait(self) -> VmBatchRequest:
        if self.all_or_nothing and any(vm.wait_s for vm in self.vms):
            raise ValueError("wait_s: the VMs of an all_or_nothing batch cannot wait for room (yet); use wait_s 0")
        return self


class Vm(BaseModel):
    id: UUID
    name: str
    status: VmStatus
    hypervisor_id: str | None
    status_reason: str | None
    cpu: int
    memory_mb: int
    disk_gb: int
    gpu: int
    labels: dict[str, str]
    strategy: Strategy | None
    restart_policy: RestartPolicy
    restart_count: int
    attempt: int
    attempts: list[dict[str, Any]]
    created_at: datetime | None
    scheduled_at: datetime | None
    started_at: datetime | None = Field(description="when its agent first reported it running on its current host")
    wait_s: int = Field(default=0, description="seconds it may wait for room when no host fits it")
    wait_until: datetime | None = Field(
        default=None, description="when its wait for room ends (the request's time + wait_s); null: it may not wait"
    )
    gang_id: UUID | None = Field(
        default=None, description="the all-or-nothing batch it belongs to (placed together or not at all)"
    )


class VmPage(BaseModel):
    items: list[Vm]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null on the last page")


class VmBatch(BaseModel):
    items: list[Vm]


class Placement(BaseModel):
    vm_id: UUID
    status: VmStatus
    decision: PlacementRecord | None = Field(description="null until a scheduler has decided")


class HostUsage(BaseModel):
    """A host's last measured usage (its agent's heartbeat), from the capacity snapshot."""

    cpu_used: float = Field(description="cores busy")
    memory_used_mb: int = Field(description="memory in use, MiB")
    allocated_cpu: int = Field(description="vCPUs allocated on the host when it was measured")
    allocated_memory_mb: int = Field(description="memory allocated on the host when it was measured, MiB")


class Host(BaseModel):
    id: str
    status: HostStatus
    labels: dict[str, str]
    capacity: Resources
    allocated: Resources
    overcommit: Overcommit
    reserved: Resources = Field(description="held back for the hypervisor itself")
    vm_count: int
    last_heartbeat: datetime | None
    scheduling_paused: bool
    usage: HostUsage | None = Field(
        default=None,
        description="measured by its agent, as of its last heartbeat; null when it reports none "
        "(or the snapshot is unreachable)",
    )


class HostPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scheduling_paused: bool


class SchedulerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default_strategy: Strategy


class SchedulerSettingsView(SchedulerSettings):
    source: str = Field(
        description="'runtime' when set through this API, 'environment' for VMSCHED_SCHEDULING_STRATEGY"
    )
