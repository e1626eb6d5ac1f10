"""The messages vmsched services and agents exchange: one pydantic model per message kind.

Every model carries ``schema_version``; consumers ignore fields they do not know, so a newer
producer can add fields without breaking older consumers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from vmsched_contract.networks import HostNetworks, VmNetworks
from vmsched_contract.planner import Planner
from vmsched_contract.storage import MAX_VOLUMES, HostPools, PlacedVolume
from vmsched_contract.strategy import Strategy

HostId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
# One run of an agent process: a new one each time the process starts (the SDK draws a UUID).
InstanceId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
# Kubernetes' label keys, less the long DNS prefix: letters, digits, '-', '_', '.', '/', starting and
# ending with a letter or digit.
LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_./-]*[A-Za-z0-9])?$"
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=LABEL_KEY_PATTERN)]
# Any text without control characters (a value ends up in logs and in the scheduling-info text).
LabelValue = Annotated[str, StringConstraints(max_length=255, pattern=r"^[^\x00-\x1f\x7f]*$")]
MAX_LABELS = 64


def keys_by_pattern(schema: dict[str, Any]) -> None:
    """The JSON schema of a dict whose keys have a pattern, as pydantic checks it. pydantic writes
    ``patternProperties``, under which a key matching no pattern may hold anything; it is
    ``propertyNames`` (every key matches) and ``additionalProperties`` (every value is one)."""
    patterns = schema.pop("patternProperties", None)
    if patterns:
        ((pattern, values),) = patterns.items()
        schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
        schema["additionalProperties"] = values


Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=MAX_LABELS, json_schema_extra=keys_by_pattern)]
# A project: lower-case letters, digits and '-' (a DNS label), as Kubernetes names namespaces.
ProjectName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
# The project of every VM made before projects existed, and of the bootstrap token.
DEFAULT_PROJECT = "default"
# How much a VM matters when room is short: one that fits nowhere may preempt VMs of lower priority.
MAX_PRIORITY = 1000
Priority = Annotated[int, Field(ge=0, le=MAX_PRIORITY)]


class TaintEffect(StrEnum):
    """What a taint does to VMs that do not tolerate it (Kubernetes' effects, without NoExecute)."""

    NO_SCHEDULE = "NoSchedule"  # a hard rule: no VM lands there unless it tolerates the taint
    PREFER_NO_SCHEDULE = "PreferNoSchedule"  # a preference: other hosts first, while one fits


class Taint(BaseModel):
    """A mark on a host that keeps VMs off it unless they tolerate it: ``gpu=true:NoSchedule``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: LabelKey
    value: LabelValue = ""
    effect: TaintEffect

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect.value}" if self.value else f"{self.key}:{self.effect.value}"


Taints = Annotated[list[Taint], Field(max_length=64)]


class TolerationOperator(StrEnum):
    EQUAL = "Equal"  # the taint's key and value are the toleration's
    EXISTS = "Exists"  # any value of the key (any key at all when the key is empty)


class Toleration(BaseModel):
    """What taints a VM accepts, as Kubernetes' tolerations: a taint is tolerated when the keys match
    (an empty key with ``Exists`` matches every key), the values match (``Equal``; ``Exists`` takes
    any) and the effects match (an empty effect takes every effect)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: Annotated[str, StringConstraints(max_length=63, pattern=f"{LABEL_KEY_PATTERN}|^$")] = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: LabelValue = ""
    effect: TaintEffect | None = Field(default=None, description="null: every effect")

    @model_validator(mode="after")
    def _coherent(self) -> Toleration:
        if self.operator is TolerationOperator.EXISTS and self.value:
            raise ValueError("operator Exists takes no value")
        if self.operator is TolerationOperator.EQUAL and not self.key:
            raise ValueError("operator Equal needs a key (an empty key tolerates everything only with Exists)")
        return self


Tolerations = Annotated[list[Toleration], Field(max_length=64)]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Message(BaseModel):
    """A message body. Each kind states its ``schema_version``: a consumer refuses (dead-letters)
    another version of a kind rather than misreading it."""

    model_config = ConfigDict(extra="ignore", frozen=True)


# Named extra resources (seed 002's open resource map: ``{"fpga": 2}``). A name is lowercase letters,
# digits, '.', '_' and '-' (starting and ending with a letter or digit), optionally after one
# vendor prefix and a '/' as Kubernetes' extended resources (``example.com/fpga``); never the name
# of a resource the fit rule already has (``gpu``: use the field).
MAX_EXTRA_NAMES = 16
MAX_EXTRA_AMOUNT = 1_000_000
_EXTRA_SEGMENT = r"[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?"
EXTRA_NAME_PATTERN = rf"^(?:{_EXTRA_SEGMENT}/)?{_EXTRA_SEGMENT}$"
RESERVED_EXTRA_NAMES = frozenset({"cpu", "memory", "memory_mb", "disk", "disk_gb", "gpu"})


_EXTRA_NAME = re.compile(EXTRA_NAME_PATTERN)


def _well_formed_extra_name(name: str) -> str:
    if not _EXTRA_NAME.match(name):
        raise ValueError(
            "an extra resource's name is lowercase letters, digits, '.', '_' and '-', starting and ending "
            "with a letter or digit, at most 63 of them, optionally after a prefix and '/' (example.com/fpga)"
        )
    if name in RESERVED_EXTRA_NAMES:
        raise ValueError(f"{name!r} is a resource of its own: use the {name} field, not extra")
    return name


ExtraName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=127),
    AfterValidator(_well_formed_extra_name),
    WithJsonSchema({"type": "string", "pattern": EXTRA_NAME_PATTERN, "maxLength": 127}),
]
ExtraAmount = Annotated[int, Field(ge=0, le=MAX_EXTRA_AMOUNT)]
Extras = Annotated[
    dict[ExtraName, ExtraAmount],
    Field(
        max_length=MAX_EXTRA_NAMES,
        description='named extra resources, e.g. {"fpga": 2}: whole units, never overcommitted '
        f"(at most {MAX_EXTRA_NAMES} names)",
    ),
]


def add_counts(
    mine: Mapping[str, int], theirs: Mapping[str, int], sign: int = 1, *, floored: bool = False
) -> dict[str, int]:
    """``mine`` plus (``sign`` 1) or minus (-1) ``theirs``, by name; names left at 0 are dropped;
    ``floored``: none below 0 (a release cannot free more than was allocated). The one arithmetic of
    named extra resources (the placement engine's ``Demand`` uses it too)."""
    total = dict(mine)
    for name, count in theirs.items():
        total[name] = total.get(name, 0) + sign * count
        if floored and total[name] < 0:
            total[name] = 0
    return {name: count for name, count in total.items() if count}


class Resources(BaseModel):
    """An amount of every resource a host offers and a VM asks for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Annotated[int, Field(ge=0, le=100_000, description="vCPUs")]
    memory_mb: Annotated[int, Field(ge=0, le=1 << 40, description="memory in MiB")]
    disk_gb: Annotated[int, Field(ge=0, le=1 << 30, description="disk in GB")]
    gpu: Annotated[int, Field(ge=0, le=1024, description="GPUs")] = 0
    # Left out when empty: a message without extras is what consumers that predate them accept.
    extra: Extras = Field(default_factory=dict, exclude_if=lambda counts: not counts)

    def __hash__(self) -> int:
        # Frozen, so hashable as before it had a map: the map hashes as its sorted items.
        return hash((self.cpu, self.memory_mb, self.disk_gb, self.gpu, tuple(sorted(self.extra.items()))))

    def plus(self, other: Resources) -> Resources:
        # Sums of valid amounts: built without validating again.
        return Resources.model_construct(
            cpu=self.cpu + other.cpu,
            memory_mb=self.memory_mb + other.memory_mb,
            disk_gb=self.disk_gb + other.disk_gb,
            gpu=self.gpu + other.gpu,
            extra=add_counts(self.extra, other.extra),
        )

    def minus(self, other: Resources) -> Resources:
        """What is left of ``self`` once ``other`` is taken out (a host's allocation, a VM released)."""
        return Resources.model_construct(
            cpu=self.cpu - other.cpu,
            memory_mb=self.memory_mb - other.memory_mb,
            disk_gb=self.disk_gb - other.disk_gb,
            gpu=self.gpu - other.gpu,
            extra=add_counts(self.extra, other.extra, -1),
        )


ZERO = Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=0)


class RestartPolicy(StrEnum):
    NEVER = "never"
    ON_FAILURE = "on_failure"


class UnschedulableReason(StrEnum):
    """Why no host takes a VM, when the answer is not one rule's name (``cpu``, ``labels``, ...)."""

    NO_AVAILABLE_AGENTS = "no_available_agents"  # no online host at all (seed 001's noAvailableAgents)
    # Seed 001's invalidStrategy, kept for the seed's vocabulary (and subscribers' older code) but never
    # emitted: the API refuses an unknown strategy with 422, and a vm.create naming one is invalid and
    # dead-lettered (docs/placement.md).
    INVALID_STRATEGY = "invalid_strategy"


class SelectorOperator(StrEnum):
    """How a host selector term tests a host's label (Kubernetes' node affinity operators)."""

    IN = "In"  # the host has the key, with one of the values
    NOT_IN = "NotIn"  # the host lacks the key, or has it with none of the values
    EXISTS = "Exists"  # the host has the key, whatever its value
    DOES_NOT_EXIST = "DoesNotExist"  # the host lacks the key


# The operators that test values, and so need at least one; the others take none.
VALUE_OPERATORS = frozenset({SelectorOperator.IN, SelectorOperator.NOT_IN})
MAX_SELECTOR_TERMS = 32
MAX_SELECTOR_VALUES = 64


class HostSelectorTerm(BaseModel):
    """One term of a VM's ``host_selector``; a host must satisfy every term."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: LabelKey = Field(description="a host label key, e.g. zone")
    operator: SelectorOperator = Field(
        description="In (one of values), NotIn (none of values, or no such label), Exists, DoesNotExist"
    )
    values: Annotated[list[LabelValue], Field(max_length=MAX_SELECTOR_VALUES)] = Field(
        default_factory=list,
        validate_default=True,
        description="at least one for In and NotIn; none for Exists and DoesNotExist",
    )

    @field_validator("values")
    @classmethod
    def _values_suit_the_operator(cls, values: list[str], info: ValidationInfo) -> list[str]:
        operator = info.data.get("operator")  # absent when the operator itself was invalid
        if operator in VALUE_OPERATORS and not values:
            raise ValueError(f"operator {operator.value} needs at least one value")
        if operator is not None and operator not in VALUE_OPERATORS and values:
            raise ValueError(f"operator {operator.value} takes no values")
        return values


HostSelector = Annotated[
    list[HostSelectorTerm],
    Field(
        max_length=MAX_SELECTOR_TERMS,
        description="terms a host's labels must all satisfy (Kubernetes' node affinity); "
        'e.g. [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]',
    ),
]


# Most VMs of a POST /v1/vms/batch travel in one vm.create; a message never carries more.
MAX_VMS_PER_MESSAGE = 1000


class VmToPlace(BaseModel):
    """One VM a scheduler is asked to place."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    vm_id: UUID
    name: str
    resources: Resources
    labels: Labels = Field(default_factory=dict)
    # Added in schema version 2 without a new version: a message without it selects every host.
    host_selector: HostSelector = Field(default_factory=list)
    tolerations: Tolerations = Field(default_factory=list, description="the host taints this VM accepts")
    # Added in schema version 2 without a new version, left out when empty: a message without it
    # needs no network.
    networks: VmNetworks = Field(default_factory=list, exclude_if=lambda networks: not networks)
    # Added in schema version 2 without a new version, left out when false.
    dedicated: bool = Field(
        default=False,
        exclude_if=lambda dedicated: not dedicated,
        description="it goes only to a host dedicated to its project",
    )
    strategy: Strategy | None = None
    # Added in schema version 2 without a new version, left out when flat (the API stores the default).
    planner: Planner = Field(default=Planner.FLAT, exclude_if=lambda planner: planner is Planner.FLAT)
    exclude_hosts: list[HostId] = Field(
        default_factory=list, description="hosts that failed this VM lately (they expire after EXCLUDE_FOR)"
    )
    attempt: Annotated[int, Field(ge=1)] = 1
    server_group: UUID | None = Field(
        default=None, description="the server group the VM is a member of (its rule applies); null for none"
    )
    gang: UUID | None = Field(
        default=None, description="the all-or-nothing batch it belongs to: its VMs are placed together or not at all"
    )
    priority: Priority = Field(
        default=0, description="0..1000; when it fits nowhere, it may preempt VMs of lower priority"
    )
    project: ProjectName = Field(default=DEFAULT_PROJECT, description="the project that owns the VM")
    reservation: UUID | None = Field(
        default=None, description="the reservation whose held room it takes (one of its slots); null for none"
    )
    # Left out when empty, as Resources.extra: a VM without volumes is the message it was.
    volumes: Annotated[list[PlacedVolume], Field(max_length=MAX_VOLUMES)] = Field(
        default_factory=list,
        exclude_if=lambda volumes: not volumes,
        description="volumes, each placed on one storage pool its host reaches with the tags and room (with "
        "the pool once placed: a migration keeps a volume on a shared pool where it is)",
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
    project: ProjectName = Field(default=DEFAULT_PROJECT, description="the project that owns the VM")
    preempted: bool | None = Field(
        default=None,
        description="whether the VM took the room of VMs it preempted (its create then waits for their "
        "deletion); absent: not known here (an announcement repeated from PostgreSQL, or an older scheduler)",
    )


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
        description="no_available_agents (no online host), all_or_nothing (a VM of a gang another VM of which "
        "fits nowhere), reservation (its reservation holds no slot for it), or the rule that rejected the most hosts "
        "(cpu, memory, disk, gpu, extra, labels, host_selector, taints, server_group, spread, paused, offline, "
        "excluded, ...)"
    )
    detail: str
    rejections: dict[str, int] = Field(
        default_factory=dict, description="hosts rejected, by the first rule they failed"
    )
    project: ProjectName = Field(default=DEFAULT_PROJECT, description="the project that owns the VM")


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
    DRAINING = "draining"  # its agent says so, or an operator's drain empties it (vmsched_domain.drain)
    OFFLINE = "offline"
    DRAINED = "drained"  # an operator's drain emptied it; it stays paused until the drain is ended
    FENCED = "fenced"  # declared down (an operator, or the fence command): takes no VM until unfenced


# Below 1 holds part of the host back (as Nova allows); above 1 overcommits.
AllocationRatio = Annotated[float, Strict(), Field(gt=0.0, le=64.0, allow_inf_nan=False)]


class Overcommit(BaseModel):
    """Allocation ratios, as Nova's cpu_allocation_ratio / ram_allocation_ratio / disk_allocation_ratio
    (GPUs are never overcommitted; see vmsched_domain.fit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: AllocationRatio = 1.0
    memory: AllocationRatio = 1.0
    disk: AllocationRatio = 1.0


class Usage(BaseModel):
    """What a host measurably uses now, as its agent measures it: the whole host (its VMs and the
    hypervisor itself), not what was allocated on it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cpu_used: Annotated[float, Field(ge=0.0, le=100_000.0, description="cores busy, e.g. 12.5 of 64")]
    memory_used_mb: Annotated[int, Field(ge=0, le=1 << 40, description="memory in use, MiB")]


class Capability(StrEnum):
    """What an agent can do beyond creating and deleting VMs; it declares so in its heartbeats."""

    MIGRATE = "migrate"  # prepare_migration, migrate, finish_migration, abort, rollback, cleanup
    POWER = "power"  # stop and start


MAX_CAPABILITIES = 32


# A hypervisor's URI (libvirt's qemu+tls://host/system, ...): one line of printable text.
MigrationUri = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^[^\x00-\x20\x7f]+$")]


class AgentHeartbeat(Message):
    """``agent.heartbeat``: an agent says it is alive and what it offers."""

    schema_version: Literal[1] = 1
    agent_id: HostId
    capacity: Resources
    labels: Labels = Field(default_factory=dict)
    taints: Taints = Field(
        default_factory=list,
        description="the host's own taints; an operator's list (PATCH /v1/hosts/{id}) replaces them",
    )
    status: Literal[HostStatus.ONLINE, HostStatus.DRAINING] = HostStatus.ONLINE
    vm_ids: list[UUID] = Field(default_factory=list)
    overcommit: Overcommit = Field(default_factory=Overcommit)
    usage: Usage | None = Field(
        default=None, description="measured load, for the least_utilized strategy; absent: ranked by allocation"
    )
    sent_at: datetime = Field(default_factory=utc_now)
    # Added in schema version 1 without a new version: an older agent sends none of these three.
    instance_id: InstanceId | None = Field(
        default=None,
        description="this run of the agent process (new at each start): while one instance of a host is online, "
        "another one's heartbeats are refused (agent.conflict)",
    )
    leaving: bool = Field(
        default=False, description="the last heartbeat of a stopping agent: it gives up the host id at once"
    )
    capabilities: Annotated[
        list[Annotated[str, StringConstraints(max_length=63)]], Field(max_length=MAX_CAPABILITIES)
    ] = Field(
        default_factory=list,
        description="what the agent can do beyond create and delete: 'migrate' (a host without it is never a "
        "migration's source or target), 'power' (stop and start); absent: neither",
    )

    # Added in schema version 1 without a new version: an agent that cannot migrate sends none.
    # Left out when absent, as Resources.extra: what every other agent sends stays as it was.
    migration_uri: MigrationUri | None = Field(
        default=None,
        exclude_if=lambda uri: uri is None,
        description="where other hosts' hypervisors reach this one's for a live migration (the libvirt agent's "
        "libvirt URI, e.g. qemu+tls://hv-0001/system); the gateway hands it to a migration's source as "
        "the command's migration.target_uri; absent: the host names none",
    )

    # Added in schema version 1 without a new version, left out when empty: an older agent sends none.
    networks: HostNetworks = Field(default_factory=list, exclude_if=lambda networks: not networks)
    storage_pools: HostPools = Field(
        default_factory=list,
        exclude_if=lambda pools: not pools,
        description="the storage pools the host reaches: local ones with capacity_gb and tags, shared ones by "
        "name (their capacity and tags are the operator's)",
    )

    def can(self, capability: Capability) -> bool:
        return capability.value in self.capabilities


class CommandAction(StrEnum):
    CREATE = "create"
    DELETE = "delete"
    # A migration (Nova's live migration; libvirt's prepare, perform, finish, confirm):
    PREPARE_MIGRATION = "prepare_migration"  # target: get ready to receive the VM from the source
    MIGRATE = "migrate"  # source: hand the VM over to the target
    FINISH_MIGRATION = "finish_migration"  # target: take the VM; it runs here from now on
    CLEANUP_MIGRATION = "cleanup_migration"  # source: the target runs it; remove what is left here
    ABORT_MIGRATION = "abort_migration"  # target: the migration is rolled back; drop what it prepared or took
    ROLLBACK_MIGRATION = "rollback_migration"  # source: the migration is rolled back; keep (or resume) the VM here
    STOP = "stop"  # power the VM off; it stays on the host
    START = "start"  # power a stopped VM on


# The migration's commands that a source carries out, and those a target carries out.
SOURCE_ACTIONS = frozenset({CommandAction.MIGRATE, CommandAction.CLEANUP_MIGRATION, CommandAction.ROLLBACK_MIGRATION})
TARGET_ACTIONS = frozenset(
    {CommandAction.PREPARE_MIGRATION, CommandAction.FINISH_MIGRATION, CommandAction.ABORT_MIGRATION}
)
MIGRATION_ACTIONS = SOURCE_ACTIONS | TARGET_ACTIONS
POWER_ACTIONS = frozenset({CommandAction.STOP, CommandAction.START})


class MigrationOrder(BaseModel):
    """Which migration a command belongs to: the VM's ``number``-th, from ``source`` to ``target``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    number: Annotated[int, Field(ge=1)]
    source: HostId
    target: HostId
    target_uri: MigrationUri | None = Field(
        default=None,
        exclude_if=lambda uri: uri is None,
        description="the target's migration URI, as its heartbeats announce it (set on the source's migrate "
        "and rollback_migration commands when the target announces one)",
    )


class AgentCommand(Message):
    """What the gateway (or the API, for deletes, stops and starts) puts on ``agent.<host id>``."""

    schema_version: Literal[1] = 1
    action: CommandAction
    vm_id: UUID
    name: str
    resources: Resources
    attempt: int = 1
    migration: MigrationOrder | None = Field(default=None, description="set on a migration's commands")
    overcommit: Overcommit | None = Field(
        default=None,
        description="the host's allocation ratios vmsched placed the VM by (the operator's overcommit over the "
        "agent's own), on create and prepare_migration: an agent that checks room counts these; absent: its own",
    )


class ReportedStatus(StrEnum):
    RUNNING = "running"  # create, finish_migration (on the target), rollback_migration (on the source), start
    FAILED = "failed"  # any command the agent could not carry out
    DELETED = "deleted"  # delete
    PREPARED = "prepared"  # prepare_migration
    HANDED_OVER = "handed_over"  # migrate
    CLEANED_UP = "cleaned_up"  # cleanup_migration
    ABORTED = "aborted"  # abort_migration
    STOPPED = "stopped"  # stop


class VmStatusReport(Message):
    """``vm.status``: an agent reports what became of a command."""

    schema_version: Literal[1] = 1
    vm_id: UUID
    agent_id: HostId
    status: ReportedStatus
    message: str = ""
    attempt: int | None = None
    action: CommandAction | None = Field(
        default=None, description="the command this answers (absent from agents older than migrations: create/delete)"
    )
    migration: int | None = Field(default=None, description="the migration's number, for a migration's command")


class VmDeleted(Message):
    """``vm.deleted``: the agent removed the VM and its capacity is free again."""

    schema_version: Literal[1] = 1
    vm_id: UUID
    hypervisor_id: HostId | None = None
    project: ProjectName = Field(default=DEFAULT_PROJECT, description="the project that owned the VM")


class PreemptionOutcome(StrEnum):
    DELETED = "deleted"  # its agent is told to delete it; then its restart policy applies
    MOVED = "moved"  # another host takes it: it is live-migrated there, and keeps running


class VmPreempted(Message):
    """``vm.preempted``: a VM of higher priority that fit nowhere needs this VM's room on its host.
    ``deleted``: its capacity is the preemptor's from this moment; its agent is told to delete it, and
    then its restart policy applies (``on_failure``: placed again, or waiting for room; ``never``: it
    ends ``failed``). ``moved``: it is live-migrated to another host (``vm.migrating``, ``vm.migrated``
    follow) and the preemptor takes the room it leaves."""

    schema_version: Literal[1] = 1
    vm_id: UUID
    hypervisor_id: HostId
    priority: Priority
    preempted_by: UUID = Field(description="the VM that took its room")
    preemptor_priority: Priority
    project: ProjectName = Field(default=DEFAULT_PROJECT, description="the project that owns the preempted VM")
    outcome: PreemptionOutcome = Field(
        default=PreemptionOutcome.DELETED, description="deleted, or moved (live-migrated to another host)"
    )


class AgentConflict(Message):
    """``agent.conflict``: heartbeats for a host came from a second agent process (another
    ``instance_id``) while the one holding the host id was online; they were refused, so the host's
    labels and capacity did not change."""

    schema_version: Literal[1] = 1
    host_id: HostId
    instance_id: InstanceId | None = Field(description="the refused instance (null: an agent too old to name one)")
    held_by: InstanceId | None = Field(description="the instance that holds the host id")
    detail: str
    at: datetime = Field(default_factory=utc_now)


class VmMigrate(Message):
    """``vm.migrate``: move a running VM off its host (``POST /v1/vms/{id}/migrate``): a scheduler
    chooses the target by every rule of the VM, its ``source`` excluded (only ``target_host``, when
    one is named), claims it and commits it."""

    schema_version: Literal[1] = 1
    vm: VmToPlace
    migration: Annotated[int, Field(ge=1)] = Field(description="the VM's migration number; a stale one is ignored")
    source: HostId
    target_host: HostId | None = Field(default=None, description="the host asked for; null: the engine chooses")


class _FromTo(Message):
    """Events with a ``from`` and a ``to`` host (Python names ``source`` and ``target``)."""

    model_config = ConfigDict(extra="ignore", frozen=True, validate_by_name=True, serialize_by_alias=True)


class VmMigrating(_FromTo):
    """``vm.migrating``: a scheduler claimed a migration target; the VM holds capacity on both hosts
    until it runs on the target (``vm.migrated``) or the migration is rolled back (``vm.migration_failed``)."""

    schema_version: Literal[1] = 1
    vm_id: UUID
    name: str
    resources: Resources
    migration: int
    source: HostId = Field(alias="from")
    target: HostId = Field(alias="to")


class VmMigrated(_FromTo):
    """``vm.migrated``: the VM runs on its new host; the old one's capacity is free again."""

    schema_version: Literal[1] = 1
    vm_id: UUID
    migration: int
    source: HostId = Field(alias="from")
    target: HostId = Field(alias="to")


class VmMigrationFailed(_FromTo):
    """``vm.migration_failed``: the migration was rolled back: the VM runs on its source still (unless
    the reason is ``source_fenced``: then it failed with its source); a target claimed for it is free
    again."""

    schema_version: Literal[1] = 1
    vm_id: UUID
    migration: int
    source: HostId = Field(alias="from")
    target: HostId | None = Field(default=None, alias="to", description="null when no target was claimed")
    reason: str = Field(
        description="the rule no host passed (cpu, server_group, migration, ...) or what failed: "
        "prepare_migration, migrate, finish_migration, timeout, target_fenced, source_fenced"
    )
    detail: str


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
    project: ProjectName = Field(default=DEFAULT_PROJECT, description="the project that owns the VM")


def batch_message_id(kind: str, vms: Sequence[tuple[UUID, int]]) -> str:
    """``<first vm id>:<kind>:<its attempt>`` and ``+<n>`` for the n more VMs the message carries:
    deterministic, so a message sent again for the same VMs is recognisably the same one."""
    (first, attempt), more = vms[0], len(vms) - 1
    return f"{first}:{kind}:{attempt}" + (f"+{more}" if more else "")


def command_message_id(command: AgentCommand) -> str:
    """``<vm_id>:<action>-command:<attempt>``, and ``m<number>`` instead of the attempt for a
    migration's command (a VM migrates many times at one attempt)."""
    which = f"m{command.migration.number}" if command.migration is not None else str(command.attempt)
    return f"{command.vm_id}:{command.action.value}-command:{which}"


def status_message_id(report: VmStatusReport) -> str:
    """Deterministic, so that a re-sent report is recognisably the same event:
    ``<vm_id>:<status>:<attempt>`` for a create or a delete, ``<vm_id>:<action>:<status>:m<number>``
    for a migration's command, ``<vm_id>:<action>:<status>:<attempt>`` for a stop or a start."""
    if report.action is None or report.action in (CommandAction.CREATE, CommandAction.DELETE):
        return f"{report.vm_id}:{report.status.value}:{report.attempt or 0}"
    which = f"m{report.migration}" if report.migration is not None else str(report.attempt or 0)
    return f"{report.vm_id}:{report.action.value}:{report.status.value}:{which}"
