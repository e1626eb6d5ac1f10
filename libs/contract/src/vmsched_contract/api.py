"""The HTTP API's request and response bodies: what vmsched_api serves and vmsched_client reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol
from uuid import UUID

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    field_validator,
    model_validator,
)

from vmsched_contract.decision import Candidate, JournalRef, PlacementRecord, PreemptionMove
from vmsched_contract.fencing import FencedBy
from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_contract.messages import (
    MAX_EXTRA_AMOUNT,
    MAX_EXTRA_NAMES,
    MAX_LABELS,
    AllocationRatio,
    ExtraName,
    HostId,
    HostSelector,
    HostSelectorTerm,
    HostStatus,
    LabelKey,
    Labels,
    LabelValue,
    Overcommit,
    PreemptionOutcome,
    Priority,
    ProjectName,
    Resources,
    RestartPolicy,
    Taint,
    Taints,
    Toleration,
    Tolerations,
    keys_by_pattern,
)
from vmsched_contract.networks import VmNetworks
from vmsched_contract.planner import Planner
from vmsched_contract.scopes import Scope
from vmsched_contract.status import DrainState, ReservationStatus, Task, VmStatus
from vmsched_contract.storage import PlacedVolume, StoragePool, Volumes
from vmsched_contract.strategy import MAX_WAIT_S, Strategy

# What a request body says as a number or a flag must be one: JSON's true is not 1, nor "4" four
# (pydantic's lax mode would take both).
Whole = Annotated[int, Strict()]
Flag = Annotated[bool, Strict()]

VmName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"),
    Field(description="letters, digits, '.', '_' and '-', starting with a letter or digit"),
]


# What a VM may ask of named extra resources: a positive amount of each name it gives.
ExtraRequest = Annotated[
    dict[ExtraName, Annotated[int, Field(ge=1, le=MAX_EXTRA_AMOUNT)]], Field(max_length=MAX_EXTRA_NAMES)
]


class DefaultSettings(Protocol):
    """The settings a VM's defaults come from (vmsched_runtime.settings.Settings has them)."""

    @property
    def default_vm_cpu(self) -> int: ...
    @property
    def default_vm_memory_mb(self) -> int: ...
    @property
    def default_wait_s(self) -> int: ...
    @property
    def planner(self) -> Planner: ...


@dataclass(frozen=True, slots=True)
class VmDefaults:
    """What a VM request that omits ``cpu`` or ``memory_mb`` gets."""

    cpu: int
    memory_mb: int
    wait_s: int = 0
    planner: Planner = Planner.FLAT

    @classmethod
    def of(cls, settings: DefaultSettings) -> VmDefaults:
        """``VMSCHED_DEFAULT_VM_CPU``, ``VMSCHED_DEFAULT_VM_MEMORY_MB``, ``VMSCHED_DEFAULT_WAIT_S`` and
        ``VMSCHED_PLANNER``."""
        return cls(
            cpu=settings.default_vm_cpu,
            memory_mb=settings.default_vm_memory_mb,
            wait_s=settings.default_wait_s,
            planner=settings.planner,
        )


class VmRequest(BaseModel):
    """What a client asks for."""

    model_config = ConfigDict(extra="forbid")

    name: VmName
    cpu: Whole | None = Field(default=None, ge=1, le=1024, description="vCPUs; omitted: VMSCHED_DEFAULT_VM_CPU")
    memory_mb: Whole | None = Field(
        default=None, ge=1, le=64 * 1024 * 1024, description="memory in MiB; omitted: VMSCHED_DEFAULT_VM_MEMORY_MB"
    )
    disk_gb: Annotated[Whole, Field(ge=0, le=1024 * 1024, description="disk in GB")]
    gpu: Annotated[Whole, Field(ge=0, le=64)] = 0
    extra: ExtraRequest = Field(
        default_factory=dict,
        # Left out of the dump when empty: the Idempotency-Key hash of a request without extras stays
        # what it was before VMs could ask for them.
        exclude_if=lambda extra: not extra,
        description='named extra resources, e.g. {"fpga": 1}: only hosts whose agents report enough of each '
        f"take the VM (whole units, never overcommitted; at most {MAX_EXTRA_NAMES} names)",
    )
    labels: Labels = Field(default_factory=dict, description="the host's labels must contain all of these")
    volumes: Volumes = Field(
        default_factory=list,
        # Left out of the dump when empty: the Idempotency-Key hash of a request without volumes is unchanged.
        exclude_if=lambda volumes: not volumes,
        description="volumes ({size_gb, tags}), each placed on one storage pool the host reaches that carries "
        "every tag and has room (first fit: docs/placement.md#storage-pools); disk_gb stays the root disk",
    )
    host_selector: HostSelector = Field(default_factory=list)
    tolerations: Tolerations = Field(
        default_factory=list,
        description="host taints this VM accepts (Kubernetes' tolerations: {key, operator Equal|Exists, value, "
        "effect}; Exists with an empty key tolerates every taint, an empty effect every effect)",
    )
    # Left out of the dump when empty: the Idempotency-Key hash of a request without networks is unchanged.
    networks: VmNetworks = Field(default_factory=list, exclude_if=lambda networks: not networks)
    # Left out of the dump when false, as networks.
    dedicated: Flag = Field(
        default=False,
        exclude_if=lambda dedicated: not dedicated,
        description="go only to a host dedicated to the token's project (PATCH /v1/hosts/{id} dedicated_to); "
        "whatever it asks, a host dedicated to another project never takes it",
    )
    strategy: Strategy | None = Field(default=None, description="overrides the cluster default for this VM")
    # Left out of the dump when null, as networks.
    planner: Planner | None = Field(
        default=None,
        exclude_if=lambda planner: planner is None,
        description="flat (every eligible host) or cluster_first (the hosts of the cluster with the most free "
        "capacity that has one that fits: CloudStack's FirstFitPlanner); omitted: VMSCHED_PLANNER",
    )
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    server_group: UUID | None = Field(
        default=None,
        description="join this server group (POST /v1/server-groups): its policy applies to where the VM goes",
    )
    wait_s: Whole | None = Field(
        default=None,
        ge=0,
        le=MAX_WAIT_S,
        description="seconds the VM may wait (status waiting) for room when no host fits it, placed oldest "
        "first as soon as capacity appears, then unschedulable with the last reason; 0: unschedulable at once; "
        "omitted: VMSCHED_DEFAULT_WAIT_S",
    )
    priority: Priority = Field(
        default=0,
        description="0..1000: when the VM fits nowhere, it may preempt VMs of lower priority on one host "
        "(the cheapest set: lowest priorities first, then fewest VMs; VMSCHED_PREEMPTION)",
    )
    reservation: UUID | None = Field(
        default=None,
        # Left out of the dump when null: the Idempotency-Key hash of a request without it is unchanged.
        exclude_if=lambda reservation: reservation is None,
        description="take the room a reservation of the token's project holds (POST /v1/reservations): the VM "
        "goes onto one of its held slots, whose size it must fit in; unschedulable when none is left",
    )

    @model_validator(mode="after")
    def _a_reserved_vm_joins_no_group(self) -> VmRequest:
        if self.reservation is not None and self.server_group is not None:
            raise ValueError("a VM taking a reservation's room cannot join a server group (yet)")
        if self.reservation is not None and self.volumes:
            raise ValueError("volumes: a VM taking a reservation's room cannot ask for volumes (yet)")
        return self

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
            extra=self.extra,
        )


class VmBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vms: Annotated[list[VmRequest], Field(min_length=1, max_length=1000)]
    all_or_nothing: Flag = Field(
        default=False,
        description="place every VM of the batch or none (gang scheduling): if they do not all fit at once, "
        "every one ends unschedulable and no capacity is held. Its VMs may not wait for room (wait_s > 0 is "
        "refused with 422; VMSCHED_DEFAULT_WAIT_S does not apply to them)",
    )

    @model_validator(mode="after")
    def _a_gang_does_not_wait(self) -> VmBatchRequest:
        if self.all_or_nothing and any(vm.wait_s for vm in self.vms):
            raise ValueError("wait_s: the VMs of an all_or_nothing batch cannot wait for room (yet); use wait_s 0")
        if self.all_or_nothing and any(vm.reservation for vm in self.vms):
            raise ValueError("reservation: the VMs of an all_or_nothing batch cannot take a reservation's room (yet)")
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
    extra: dict[str, int] = Field(default_factory=dict, description="named extra resources it asks for")
    volumes: list[PlacedVolume] = Field(
        default_factory=list, description="its volumes, each with the storage pool it was placed on (null: not yet)"
    )
    labels: dict[str, str]
    host_selector: list[HostSelectorTerm] = Field(description="terms the host's labels must all satisfy")
    tolerations: list[Toleration] = Field(default_factory=list)
    networks: list[str] = Field(default_factory=list, description="the networks its host must reach")
    dedicated: bool = Field(default=False, description="it goes only to a host dedicated to its project")
    planner: Planner = Field(default=Planner.FLAT, description="which eligible hosts its strategy ranks")
    strategy: Strategy | None
    restart_policy: RestartPolicy
    restart_count: int
    attempt: int
    attempts: list[dict[str, Any]]
    created_at: datetime | None
    scheduled_at: datetime | None
    started_at: datetime | None = Field(description="when its agent first reported it running on its current host")
    server_group: UUID | None = Field(default=None, description="the server group it is a member of")
    wait_s: int = Field(default=0, description="seconds it may wait for room when no host fits it")
    wait_until: datetime | None = Field(
        default=None, description="when its wait for room ends (the request's time + wait_s); null: it may not wait"
    )
    gang_id: UUID | None = Field(
        default=None, description="the all-or-nothing batch it belongs to (placed together or not at all)"
    )
    priority: int = Field(default=0, description="0..1000: it may preempt VMs of lower priority")
    preempted_by: UUID | None = Field(default=None, description="the VM of higher priority that took its room")
    project: str = Field(description="the project that owns it (the requesting token's)")
    task: Task | None = Field(
        default=None,
        description="what its agent was asked and has not answered: stopping, starting, or a migration's step "
        "(choosing_target, preparing, handing_over, finishing); null: nothing",
    )
    migrations: int = Field(default=0, description="migrations asked for; while migrating, the current one's number")
    migration_target: str | None = Field(
        default=None, description="while migrating: the target a scheduler claimed (it holds the VM's share too)"
    )
    reservation: UUID | None = Field(default=None, description="the reservation whose held room it takes")


class MigrateRequest(BaseModel):
    """Where to move a running VM."""

    model_config = ConfigDict(extra="forbid")

    target_host: HostId | None = Field(
        default=None,
        description="the host to move it to (needs the scope hosts:admin; every rule of the VM is checked on "
        "it); null: the scheduler "
        "chooses one by every rule of the VM, its host excluded",
    )


class ReservationRequest(BaseModel):
    """Capacity to hold for a project: ``count`` slots of one size, placed by the scheduler as VMs are."""

    model_config = ConfigDict(extra="forbid")

    project: ProjectName = Field(description="the project whose VMs (naming the reservation) may use the room")
    cpu: Annotated[Whole, Field(ge=1, le=1024, description="vCPUs of each slot")]
    memory_mb: Annotated[Whole, Field(ge=1, le=64 * 1024 * 1024, description="memory of each slot, MiB")]
    disk_gb: Annotated[Whole, Field(ge=0, le=1024 * 1024, description="disk of each slot, GB")]
    gpu: Annotated[Whole, Field(ge=0, le=64)] = 0
    count: Annotated[Whole, Field(ge=1, le=1000, description="slots: VMs of that size the room is for")] = 1
    host_selector: HostSelector = Field(default_factory=list, description="terms the hosts' labels must satisfy")
    ends_at: AwareDatetime | None = Field(
        default=None, description="when what is still held goes back to the hosts (status expired); null: never"
    )


class Reservation(BaseModel):
    id: UUID
    project: str
    status: ReservationStatus = Field(
        description="pending (not placed yet), held, unschedulable (status_reason and placement say why), "
        "expired (ends_at passed) or released (DELETE)"
    )
    status_reason: str | None
    cpu: int
    memory_mb: int
    disk_gb: int
    gpu: int
    count: int
    used: int = Field(description="slots a VM naming the reservation took (their room is that VM's)")
    held: int = Field(description="slots still held for the project's VMs")
    lost: int = Field(
        default=0,
        description="held slots lost with their host (silent past VMSCHED_AGENT_LOST_TIMEOUT) and not placed "
        "again on another host yet (status_reason says why)",
    )
    hosts: list[str] = Field(description="the hosts of the held and used slots")
    host_selector: list[HostSelectorTerm]
    ends_at: datetime | None
    created_at: datetime
    updated_at: datetime
    placement: PlacementRecord | None = Field(
        default=None, description="the decision record of its placement (for an unschedulable one: why)"
    )


class ServerGroupRequest(BaseModel):
    """A server group to create (Nova's server groups, Kubernetes' pod affinity and topology spread)."""

    model_config = ConfigDict(extra="forbid")

    name: VmName
    policy: GroupPolicy = Field(
        description="anti-affinity (at most max_per_domain members per domain), affinity (every member in "
        "one domain), spread (member counts of any two eligible domains differ by at most max_skew), "
        "soft-anti-affinity and soft-affinity (preferences: never refuse a host)"
    )
    topology_key: LabelKey = Field(
        default=HOST_TOPOLOGY,
        description="what a domain is: 'host' (each host), or a host label such as 'zone' or 'rack' (hosts "
        "with the same value); a host without the label takes no member of a hard group",
    )
    max_per_domain: Whole = Field(default=1, ge=1, le=100_000, description="anti-affinity: members a domain may hold")
    max_skew: Whole = Field(
        default=1, ge=1, le=100_000, description="spread: how far a domain's count may exceed the emptiest one's"
    )
    max_unavailable: Whole | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="disruption budget: drains, rebalance plans and preemption take a member only while fewer "
        "than this many are unavailable (not running); null: no budget (docs/operations.md#disruption-budgets)",
    )


class ServerGroup(ServerGroupRequest):
    id: UUID
    members: list[UUID] = Field(description="its VMs not deleted, oldest first")
    created_at: datetime | None
    project: str = Field(description="the project that owns it; only that project's VMs may join it")


class VmPage(BaseModel):
    items: list[Vm]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null on the last page")


class VmBatch(BaseModel):
    items: list[Vm]


class Placement(BaseModel):
    vm_id: UUID
    status: VmStatus
    decision: PlacementRecord | None = Field(description="null until a scheduler has decided")
    preemption: PreemptionMove | None = Field(
        default=None,
        description="the preemption that moved VMs off a host to make room for this VM (it was then placed by a "
        "decision of its own, the one above); null when none did",
    )


class VictimFate(BaseModel):
    """What became of one victim of a preemption, as its row says now."""

    vm_id: UUID
    outcome: PreemptionOutcome = Field(
        description="moved (live-migrated off the host, and still running elsewhere) or deleted (its agent was "
        "told to delete it; then its restart policy applied)"
    )
    from_host: str = Field(description="the host it was preempted on")
    status: VmStatus | None = Field(description="its status now; null when it is gone from the VM table")
    host: str | None = Field(
        description="where it is now: the host it runs on (moved, or restarted after a delete), the target "
        "claimed while it is still moving; null when it runs nowhere"
    )


class PreemptionReplay(BaseModel):
    """The preemption that made room for a VM by moving its victims, chosen again on its inputs."""

    journal: JournalRef
    decided_host: str = Field(description="the host whose VMs were moved off")
    host: str | None = Field(description="the host the replay would free; null when none, or when unknown (same null)")
    same: bool | None = Field(
        description="the replay chose the recorded host and victims; null when the decision's journal entry was "
        "pruned (VMSCHED_JOURNAL_RETENTION): the victims are still told"
    )
    victims: list[VictimFate] = Field(description="the victims moved then, and where they are now")


class PlacementReplay(BaseModel):
    """A decision made again on the exact inputs it saw (docs/placement.md, "Replay")."""

    vm_id: UUID
    journal: JournalRef
    recorded_strategy: Strategy = Field(description="the strategy the scheduler decided with")
    decided_host: str | None = Field(description="the host the scheduler's engine chose then; null: none fitted")
    decided_score: float | None = None
    strategy: Strategy = Field(description="the strategy of this replay (?strategy=, else the recorded one)")
    host: str | None = Field(description="the host the replay chose; null when none fits")
    score: float | None = None
    candidates: list[Candidate] = Field(default_factory=list, description="the replay's host, then the next best")
    same: bool = Field(description="the replay chose the recorded host with the recorded score")
    hosts: int = Field(description="hosts the decision saw")
    usage: Literal["exact", "approximate"] = Field(
        default="exact",
        description="the hosts' measured usage this replay ranked by: exact (the usage the decision saw, "
        "or a strategy that reads none; always so for the recorded strategy) or approximate (a ?strategy= "
        "that reads measured usage, least_utilized, on a decision whose strategy did not: the journal "
        "keeps usage only for decisions that read it, so each host's is the last one journaled before "
        "the decision, and the choice may differ from what that strategy would have chosen then)",
    )
    victims: list[UUID] | None = Field(
        default=None,
        description="a preemption's replay: the VMs it preempts on its host (each preempted VM names the "
        "preemptor in preempted_by); null for other decisions",
    )
    fates: list[VictimFate] | None = Field(
        default=None,
        description="a preemption's replay: what became of the VMs it preempted then (deleted, and where "
        "their restart policy took them); null for other decisions",
    )
    preemption: PreemptionReplay | None = Field(
        default=None,
        description="for a VM placed once the victims of a preemption by move had left: that preemption "
        "replayed, its victims and where they went; null when no preemption moved VMs for it",
    )


class HostUsage(BaseModel):
    """A host's last measured usage (its agent's heartbeat), from the capacity snapshot."""

    cpu_used: float = Field(description="cores busy")
    memory_used_mb: int = Field(description="memory in use, MiB")
    allocated_cpu: int = Field(description="vCPUs allocated on the host when it was measured")
    allocated_memory_mb: int = Field(description="memory allocated on the host when it was measured, MiB")


class RatioOverrides(BaseModel):
    """Allocation ratios an operator set; null where the agent's ratio applies."""

    cpu: float | None = None
    memory: float | None = None
    disk: float | None = None


class Host(BaseModel):
    id: str
    status: HostStatus
    labels: dict[str, str] = Field(description="effective: the agent's labels overlaid by the operator's")
    operator_labels: dict[str, str] = Field(
        default_factory=dict, description="the labels the operator set (PATCH); they win over the agent's"
    )
    taints: list[Taint] = Field(
        default_factory=list, description="effective: the operator's list when set, else the agent's"
    )
    operator_taints: list[Taint] | None = Field(
        default=None, description="the taints the operator set (PATCH); null when the agent's apply"
    )
    capacity: Resources
    allocated: Resources
    overcommit: Overcommit = Field(
        description="effective allocation ratios: the operator's where set, else the agent's"
    )
    operator_overcommit: RatioOverrides = Field(default_factory=RatioOverrides)
    reserved: Resources = Field(description="held back for the hypervisor itself (set by the operator)")
    vm_count: int
    last_heartbeat: datetime | None
    scheduling_paused: bool
    capabilities: list[str] = Field(
        default_factory=list,
        description="what its agent declares it can do beyond create and delete: migrate, power (stop/start)",
    )
    networks: list[str] = Field(default_factory=list, description="the networks it reaches (its agent's word)")
    dedicated_to: str | None = Field(
        default=None, description="the project whose VMs alone it takes (set by the operator); null: any project's"
    )
    storage_pools: list[StoragePool] = Field(
        default_factory=list,
        description="the storage pools its agent says it reaches (a shared pool's numbers: GET /v1/storage-pools)",
    )
    usage: HostUsage | None = Field(
        default=None,
        description="measured by its agent, as of its last heartbeat; null when it reports none "
        "(or the snapshot is unreachable)",
    )
    fenced_at: datetime | None = Field(
        default=None, description="when the host was declared down (fenced); null: not fenced"
    )
    fenced_by: FencedBy | None = Field(default=None, description="who fenced it: operator or command")


class OvercommitPatch(BaseModel):
    """Allocation ratios to set; a null withdraws the operator's ratio (the agent's applies again)."""

    model_config = ConfigDict(extra="forbid")

    cpu: AllocationRatio | None = None
    memory: AllocationRatio | None = None
    disk: AllocationRatio | None = None


ReservedAmount = Annotated[Whole, Field(ge=0)]


class ReservedPatch(BaseModel):
    """Amounts held back for the hypervisor itself; those not given stay as they are."""

    model_config = ConfigDict(extra="forbid")

    cpu: Annotated[ReservedAmount, Field(le=100_000)] | None = None
    memory_mb: Annotated[ReservedAmount, Field(le=1 << 40)] | None = None
    disk_gb: Annotated[ReservedAmount, Field(le=1 << 30)] | None = None
    gpu: Annotated[ReservedAmount, Field(le=1024)] | None = None

    @field_validator("cpu", "memory_mb", "disk_gb", "gpu")
    @classmethod
    def _not_null(cls, value: int | None) -> int | None:
        if value is None:
            raise ValueError("may not be null (0 holds nothing back)")
        return value


class DrainRequest(BaseModel):
    """How to empty a host (CloudStack's maintenance mode, ``kubectl drain``)."""

    model_config = ConfigDict(extra="forbid")

    evacuate: bool = Field(
        default=True,
        description="move every VM away by live migration; false: only pause the host and wait for its VMs to leave",
    )
    deadline_s: Whole = Field(
        default=600, ge=1, le=86_400, description="seconds to try; the VMs left then stay where they are, running"
    )
    max_parallel: Whole = Field(default=4, ge=1, le=64, description="migrations in flight at once")


class DrainedVm(BaseModel):
    vm_id: UUID
    to: str = Field(description="the host it runs on now")


class StuckVm(BaseModel):
    vm_id: UUID
    reason: str = Field(description="why the drain cannot move it now (it tries again while the deadline allows)")


class Drain(BaseModel):
    """A host's drain and where it stands."""

    host_id: str
    state: DrainState = Field(
        description="draining (VMs left), drained (nothing on the host: patch it, then DELETE the drain), "
        "timed_out (the deadline passed; the VMs left are listed in stuck, still running)"
    )
    evacuate: bool
    max_parallel: int
    deadline_at: datetime
    created_at: datetime
    ended_at: datetime | None
    moved: list[DrainedVm] = Field(description="the VMs this drain migrated away")
    in_flight: list[UUID] = Field(description="the VMs migrating away now")
    stuck: list[StuckVm] = Field(description="the VMs it cannot move now, each with the reason")
    queued: list[UUID] = Field(description="the VMs waiting for one of the max_parallel migration slots")


class HostPatch(BaseModel):
    """What an operator changes on a host; at least one field. Fields left out stay as they are."""

    model_config = ConfigDict(extra="forbid")

    scheduling_paused: Flag | None = Field(default=None, description="maintenance: no new VMs; its VMs stay")
    labels: (
        Annotated[dict[LabelKey, LabelValue | None], Field(max_length=MAX_LABELS, json_schema_extra=keys_by_pattern)]
        | None
    ) = Field(
        default=None,
        description="operator labels, merged over what the agent reports; a null value removes the "
        "operator's label (an agent's label of that key then applies again)",
    )
    taints: Taints | None = Field(
        default=None,
        description="replaces the operator's taints (the agent's no longer apply); null withdraws them "
        "(the agent's apply again)",
    )
    overcommit: OvercommitPatch | None = Field(default=None, description="allocation ratios (as Nova's)")
    reserved: ReservedPatch | None = Field(default=None, description="held back for the hypervisor itself")
    dedicated_to: ProjectName | None = Field(
        default=None,
        description="take only this project's VMs (whatever their tolerations; CloudStack's dedicated hosts, "
        "Nova's AggregateMultiTenancyIsolation); null: any project's again",
    )

    @field_validator("scheduling_paused", "labels", "overcommit", "reserved")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("may not be null (leave it out to keep it as it is)")
        return value

    @model_validator(mode="after")
    def _something(self) -> HostPatch:
        if not self.model_fields_set:
            raise ValueError(f"nothing to change: give at least one of {', '.join(HostPatch.model_fields)}")
        return self


class SchedulerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default_strategy: Strategy


class SchedulerSettingsView(SchedulerSettings):
    source: str = Field(
        description="'runtime' when set through this API, 'environment' for VMSCHED_SCHEDULING_STRATEGY"
    )


class ErrorDetail(BaseModel):
    """A refusal: what was wrong."""

    detail: str


class QuotaRefusal(BaseModel):
    """A VM request refused because it would take its project past a limit of its quota."""

    reason: Literal["quota_exceeded"]
    resource: str = Field(description="instances, cpu, memory_mb, disk_gb or gpu")
    limit: int
    used: int = Field(description="what the project's VMs hold now")
    requested: int = Field(description="what the request asked for")


class Quota(BaseModel):
    """A project's limits; null (or left out): no limit on that resource."""

    model_config = ConfigDict(extra="forbid")

    instances: Annotated[Whole, Field(ge=0, le=10_000_000)] | None = Field(default=None, description="VMs")
    cpu: Annotated[Whole, Field(ge=0, le=1 << 40)] | None = Field(default=None, description="vCPUs, summed")
    memory_mb: Annotated[Whole, Field(ge=0, le=1 << 50)] | None = Field(default=None, description="MiB, summed")
    disk_gb: Annotated[Whole, Field(ge=0, le=1 << 50)] | None = Field(default=None, description="GB, summed")
    gpu: Annotated[Whole, Field(ge=0, le=1 << 40)] | None = Field(default=None, description="GPUs, summed")
    max_priority: Annotated[Whole, Field(ge=0, le=1000)] | None = Field(
        default=None, description="the highest priority its VMs may ask for"
    )


class ProjectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ProjectName = Field(description="lower-case letters, digits and '-' (a DNS label)")
    quota: Quota = Field(default_factory=Quota)


class ProjectUsage(BaseModel):
    """What the project's VMs use now: every VM but those that ended deleted, unschedulable or failed."""

    instances: int
    cpu: int
    memory_mb: int
    disk_gb: int
    gpu: int


class Project(BaseModel):
    name: str
    quota: Quota
    usage: ProjectUsage
    created_at: datetime


TokenName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"),
    Field(description="letters, digits, '.', '_' and '-', starting with a letter or digit"),
]


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TokenName
    project: ProjectName = Field(description="the project whose VMs the token sees and changes")
    scopes: Annotated[list[Scope], Field(min_length=1, max_length=len(Scope))] = Field(
        description="vms:read, vms:write, hosts:read, hosts:admin, admin (docs/security.md)"
    )
    expires_at: AwareDatetime | None = Field(default=None, description="null: it never expires (revoke it)")

    @field_validator("scopes")
    @classmethod
    def _distinct(cls, scopes: list[Scope]) -> list[Scope]:
        if len(set(scopes)) != len(scopes):
            raise ValueError("a scope is named twice")
        return scopes


class Token(BaseModel):
    """A token as listed: never its secret."""

    id: UUID
    name: str
    project: str
    scopes: list[Scope]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None = Field(default=None, description="when it was revoked; null while it is live")


class TokenCreated(Token):
    token: str = Field(description="the secret, shown this once: send it as Authorization: Bearer <token>")


class AuditRecord(BaseModel):
    id: int
    at: datetime
    token_id: str | None = Field(description="the token's id ('bootstrap' for VMSCHED_BOOTSTRAP_TOKEN); null: none")
    project: str | None = Field(description="the token's project")
    action: str = Field(description="the method and the route, e.g. 'DELETE /v1/vms/{vm_id}'")
    target: str = Field(description="the path it acted on, or what it created")
    status: int = Field(description="the HTTP status it was answered with")


class AuditPage(BaseModel):
    items: list[AuditRecord] = Field(description="newest first")
    next_cursor: str | None = Field(description="pass as ?cursor= for the next (older) page; null on the last page")
