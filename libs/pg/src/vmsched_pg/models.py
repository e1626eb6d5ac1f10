"""The durable truth: SQLAlchemy 2 models of the ``vms``, ``hosts``, ``server_groups``,
``scheduler_settings``, ``projects``, ``tokens``, ``audit``, ``reservations``, ``reservation_slots``,
``host_drains``, ``rebalance_plans``, ``decision_journal``, ``storage_pools`` and ``vm_volumes`` tables.

A host's ``alloc_*`` columns are the sum of the resources of its VMs in a status that holds capacity
(``vmsched_domain.lifecycle.HOLDS_CAPACITY``; ``alloc_extra`` by name), of the VMs migrating to it
(``migration_target``) and of its reservation slots still ``held`` (``vm_count`` counts those slots
too: each is one VM's room); :mod:`vmsched_pg.shares` says it once, as SQL. They are changed
only in the same transaction as the VM row that causes the change, under the row lock of the host,
and a placement only adds to them when the result stays within capacity times the overcommit ratio:
that conditional update is what makes overcommit impossible whatever the Redis snapshot says.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from vmsched_contract.messages import DEFAULT_PROJECT


class Base(DeclarativeBase):
    pass


class VmRow(Base):
    __tablename__ = "vms"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str | None] = mapped_column(Text)
    hypervisor_id: Mapped[str | None] = mapped_column(String(128))
    cpu: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(BigInteger)
    disk_gb: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, server_default="0")
    # Named extra resources it asks for: {name: count} (messages.Resources.extra).
    extra: Mapped[dict[str, int]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    labels: Mapped[dict[str, str]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    # [{size_gb, tags, pool}]: the volumes it asks for (storage.Volume), each with its pool once placed.
    volumes: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # [{key, operator, values}]: terms the host's labels must all satisfy (messages.HostSelectorTerm).
    host_selector: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    strategy: Mapped[str | None] = mapped_column(String(32))
    restart_policy: Mapped[str] = mapped_column(String(16), server_default="never")
    restart_count: Mapped[int] = mapped_column(Integer, server_default="0")
    # Placement attempt (1-based). Each retry on another host, after an agent refused the VM or a
    # restart after a failure, increments it; messages carry it so stale ones are recognised.
    attempt: Mapped[int] = mapped_column(Integer, server_default="1")
    # Creates the agents could not carry out since the VM last ran, against MAX_ATTEMPTS (restarts
    # are counted in restart_count, not here).
    failures: Mapped[int] = mapped_column(Integer, server_default="0")
    # Hosts that failed the VM, each with the epoch second its exclusion ends (EXCLUDE_FOR).
    exclusions: Mapped[dict[str, float]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    attempts: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # Kubernetes-style tolerations of host taints: [{key, operator, value, effect}].
    tolerations: Mapped[list[dict[str, str]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # The networks its host must reach (names, as VmRequest.networks).
    networks: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # It goes only to a host dedicated to its project (hosts.dedicated_to).
    dedicated: Mapped[bool] = mapped_column(Boolean, server_default="false")
    # Which eligible hosts its strategy ranks (vmsched_contract.planner): as asked, else VMSCHED_PLANNER.
    planner: Mapped[str] = mapped_column(String(16), server_default="flat")
    # Unique within its project (ux_vms_project_idempotency_key).
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    scheduled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # When its agent first reported it running on its current host (None: it never ran there).
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # NULL while the message the current status implies (vm.create for pending, the delete command
    # for deleting) has not been confirmed by the broker; a sweeper publishes those again.
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The server group it is a member of (vmsched_domain.groups); NULL for none.
    server_group: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("server_groups.id", ondelete="SET NULL")
    )
    # How long the VM may wait for room when no host fits it (0: unschedulable at once), and until
    # when: the request's time plus wait_s (None when it may not wait).
    wait_s: Mapped[int] = mapped_column(Integer, server_default="0")
    wait_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The VMs of one all-or-nothing batch share it: placed together or not at all.
    gang_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # 0..1000: a VM that fits nowhere may preempt VMs of lower priority (docs/placement.md).
    priority: Mapped[int] = mapped_column(Integer, server_default="0")
    # The VM that preempted it, while and after it is preempted.
    preempted_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # The preemption that moved VMs off a host to make room for this VM (vmsched_contract.decision.PreemptionMove).
    preemption: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # The project that owns it (the token's that asked for it): only that project's tokens see it.
    project: Mapped[str] = mapped_column(String(63), server_default=DEFAULT_PROJECT)
    # What vmsched asked of an agent for the VM and awaits (vmsched_contract.status.Task), and since
    # when (a migration: since it was asked for; VMSCHED_MIGRATION_TIMEOUT counts from there).
    task: Mapped[str | None] = mapped_column(String(32))
    task_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Migrations asked for; while migrating, the current one's number (messages carry it).
    migrations: Mapped[int] = mapped_column(Integer, server_default="0")
    # While migrating: the host a migration request named (NULL: the engine chooses), and the target
    # a scheduler claimed (NULL until then). A claimed target holds the VM's share as well.
    target_host: Mapped[str | None] = mapped_column(String(128))
    migration_target: Mapped[str | None] = mapped_column(String(128))
    # The reservation whose held room it took (vmsched_domain.reservations); NULL for none.
    reservation: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))

    __table_args__ = (
        Index("ix_vms_created_id", "created_at", "id"),
        Index("ix_vms_status_created", "status", "created_at", "id"),
        Index("ix_vms_hypervisor", "hypervisor_id", "status"),
        Index(
            "ix_vms_unpublished",
            "updated_at",
            postgresql_where=text("published_at IS NULL AND status IN ('pending', 'deleting', 'preempted')"),
        ),
        Index("ix_vms_server_group", "server_group", "status", postgresql_where=text("server_group IS NOT NULL")),
        Index("ix_vms_waiting_updated", "updated_at", postgresql_where=text("status = 'waiting'")),
        Index("ix_vms_waiting_until", "wait_until", postgresql_where=text("status = 'waiting'")),
        Index("ix_vms_gang", "gang_id", postgresql_where=text("gang_id IS NOT NULL")),
        Index("ix_vms_preempting", "preempted_by", postgresql_where=text("status = 'preempted'")),
        Index("ix_vms_project_created", "project", "created_at", "id"),
        Index("ux_vms_project_idempotency_key", "project", "idempotency_key", unique=True),
        Index("ix_vms_task", "updated_at", postgresql_where=text("task IS NOT NULL")),
        Index("ix_vms_migration_target", "migration_target", postgresql_where=text("migration_target IS NOT NULL")),
    )


class HostRow(Base):
    __tablename__ = "hosts"
    # Every heartbeat rewrites its host's row (a thousand hosts every 10 s: 100 updates a second).
    # Room left on each page keeps the new version on the old one's page (a HOT update: the hosts'
    # only index, the key, is not touched), which frees the old one without VACUUM; at 100 the
    # table grew between autovacuums (migration 0033).
    __table_args__ = {"postgresql_with": {"fillfactor": "50"}}

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    # labels, taints and the ratios are the effective values every reader uses: the agent's (agent_*,
    # from its last heartbeat) overlaid by the operator's (operator_*, PATCH /v1/hosts/{id}); the
    # overlay is written in one place, vmsched_pg.inventory.
    labels: Mapped[dict[str, str]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    agent_labels: Mapped[dict[str, str]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    operator_labels: Mapped[dict[str, str]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    taints: Mapped[list[dict[str, str]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    agent_taints: Mapped[list[dict[str, str]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # NULL: the operator set no taints (the agent's apply); a list, even empty, replaces the agent's.
    operator_taints: Mapped[list[dict[str, str]] | None] = mapped_column(JSONB)
    cpu: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(BigInteger)
    disk_gb: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, server_default="0")
    # Named extra resources its agent reports, {name: count}: the agent's alone (the operator
    # overlays none), never overcommitted, nothing reserved (vmsched_domain.fit.extra_shortfall).
    extra: Mapped[dict[str, int]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    cpu_ratio: Mapped[float] = mapped_column(Float, server_default="1.0")
    memory_ratio: Mapped[float] = mapped_column(Float, server_default="1.0")
    disk_ratio: Mapped[float] = mapped_column(Float, server_default="1.0")
    agent_cpu_ratio: Mapped[float] = mapped_column(Float, server_default="1.0")
    agent_memory_ratio: Mapped[float] = mapped_column(Float, server_default="1.0")
    agent_disk_ratio: Mapped[float] = mapped_column(Float, server_default="1.0")
    # NULL: the agent's ratio applies.
    operator_cpu_ratio: Mapped[float | None] = mapped_column(Float)
    operator_memory_ratio: Mapped[float | None] = mapped_column(Float)
    operator_disk_ratio: Mapped[float | None] = mapped_column(Float)
    # Held back for the hypervisor itself (OpenStack Placement's ``reserved``): the fit rule gives
    # VMs floor((capacity - reserved) x ratio). Only the operator sets it (agents report none).
    reserved_cpu: Mapped[int] = mapped_column(Integer, server_default="0")
    reserved_memory_mb: Mapped[int] = mapped_column(BigInteger, server_default="0")
    reserved_disk_gb: Mapped[int] = mapped_column(BigInteger, server_default="0")
    reserved_gpu: Mapped[int] = mapped_column(Integer, server_default="0")
    alloc_cpu: Mapped[int] = mapped_column(Integer, server_default="0")
    alloc_memory_mb: Mapped[int] = mapped_column(BigInteger, server_default="0")
    alloc_disk_gb: Mapped[int] = mapped_column(BigInteger, server_default="0")
    alloc_gpu: Mapped[int] = mapped_column(Integer, server_default="0")
    # The sum of its VMs' extras, by name (names at 0 are left out), kept as alloc_* are.
    alloc_extra: Mapped[dict[str, int]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    vm_count: Mapped[int] = mapped_column(Integer, server_default="0")
    scheduling_paused: Mapped[bool] = mapped_column(Boolean, server_default="false")
    last_heartbeat: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The agent process (its heartbeats' instance_id) that holds this host id; NULL: none does (a new
    # host, an agent that left, or one too old to name itself). See vmsched_gateway.instances.
    agent_instance: Mapped[str | None] = mapped_column(String(64))
    # What its agent declares it can do beyond create and delete (messages.Capability): "migrate",
    # "power"; from its last heartbeat.
    capabilities: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # The networks it reaches, from its last heartbeat (names, sorted).
    networks: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # The project whose VMs alone it takes (the operator's, PATCH); NULL: any project's.
    dedicated_to: Mapped[str | None] = mapped_column(String(63))
    # Where other hosts' hypervisors reach this one's for a live migration (its heartbeats'
    # migration_uri; NULL: its agent names none). Handed to a migration's source (MigrationOrder.target_uri).
    migration_uri: Mapped[str | None] = mapped_column(String(1024))
    # Fencing (docs/operations.md#fencing): when the host was declared down, and by whom ("operator"
    # or "command"); NULL: not fenced. While fenced its status is "fenced" and it takes no VM.
    fenced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    fenced_by: Mapped[str | None] = mapped_column(String(16))
    # When the gateway last acted on this host being lost (ran VMSCHED_FENCE_COMMAND, or announced
    # host.fence_needed); cleared when the host heartbeats again or is unfenced (a new silence).
    fence_tried_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    fence_error: Mapped[str | None] = mapped_column(Text)  # the last fence command's failure
    # The fence command's tries in this silence (counted afresh once fence_tried_at was cleared), and
    # when it may run again: after a failure, with a backoff; while it runs, once it must have ended
    # (a gateway that died meanwhile). NULL: not again (fence_needed is announced once).
    fence_attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    fence_retry_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The storage pools its last heartbeat lists: [{name, kind, capacity_gb, tags}] by name
    # (vmsched_redis.storage_pools.pools_json); a shared pool's numbers are its storage_pools row's.
    storage_pools: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class StoragePoolRow(Base):
    """A shared storage pool: its capacity and tags are the operator's (PUT /v1/storage-pools/{name});
    what is allocated on it is the sum of its ``vm_volumes`` of VMs that hold capacity."""

    __tablename__ = "storage_pools"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    capacity_gb: Mapped[int] = mapped_column(BigInteger)
    tags: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class VmVolumeRow(Base):
    """What a placed VM's volumes take of one pool (a local pool of its host, or a shared pool): the
    rows a pool's allocation is summed from (those of VMs in a status that holds capacity)."""

    __tablename__ = "vm_volumes"

    vm_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("vms.id", ondelete="CASCADE"), primary_key=True
    )
    pool: Mapped[str] = mapped_column(String(128), primary_key=True)
    shared: Mapped[bool] = mapped_column(Boolean)
    size_gb: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_vm_volumes_pool", "pool"),)


class ServerGroupRow(Base):
    """A server group: its members (VMs naming it) kept apart or together (vmsched_domain.groups).
    Immutable once created; deleted only while none of its VMs is alive."""

    __tablename__ = "server_groups"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    policy: Mapped[str] = mapped_column(String(32))
    topology_key: Mapped[str] = mapped_column(String(63), server_default="host")
    max_per_domain: Mapped[int] = mapped_column(Integer, server_default="1")
    max_skew: Mapped[int] = mapped_column(Integer, server_default="1")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # The project that owns it; VMs of that project only may join it.
    project: Mapped[str] = mapped_column(String(63), server_default=DEFAULT_PROJECT)
    # Its disruption budget (vmsched_domain.disruption): drains, rebalance plans and preemption take a
    # member only while fewer than this many are unavailable. NULL: no budget. At least 0 (0030).
    max_unavailable: Mapped[int | None] = mapped_column(Integer)


class SchedulerSettingRow(Base):
    """Cluster-wide settings changed at runtime (GET/PUT /v1/settings/scheduler)."""

    __tablename__ = "scheduler_settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ProjectRow(Base):
    """A project: owns VMs, server groups and tokens. A NULL quota column is no limit on that resource."""

    __tablename__ = "projects"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    quota_instances: Mapped[int | None] = mapped_column(Integer)
    quota_cpu: Mapped[int | None] = mapped_column(BigInteger)
    quota_memory_mb: Mapped[int | None] = mapped_column(BigInteger)
    quota_disk_gb: Mapped[int | None] = mapped_column(BigInteger)
    quota_gpu: Mapped[int | None] = mapped_column(BigInteger)
    quota_max_priority: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class HostDrainRow(Base):
    """A host being emptied (POST /v1/hosts/{id}/drain; vmsched_domain.drain): what was asked, where
    it stands, the migrations it started (``{vm_id: migration number}``) and the last failure of each
    VM it could not move (``{vm_id: {reason, at}}``, ``at`` in epoch seconds)."""

    __tablename__ = "host_drains"

    host_id: Mapped[str] = mapped_column(String(128), ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    evacuate: Mapped[bool] = mapped_column(Boolean)
    max_parallel: Mapped[int] = mapped_column(Integer)
    deadline_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    state: Mapped[str] = mapped_column(String(16))
    started: Mapped[dict[str, int]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    failures: Mapped[dict[str, dict[str, object]]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class RebalancePlanRow(Base):
    """A rebalancing plan (POST /v1/rebalance/plans; vmsched_placement.rebalance): what was asked, the
    moves computed (``[{vm_id, from, to, gain}]``) with the fleet's score before and after them, and
    once applied (``state`` applying, then done) each move's outcome in ``progress``
    (``{vm_id: {state, migration, reason}}``)."""

    __tablename__ = "rebalance_plans"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    goal: Mapped[str] = mapped_column(String(16))
    max_moves: Mapped[int] = mapped_column(Integer)
    host_selector: Mapped[list[dict[str, object]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    moves: Mapped[list[dict[str, object]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    score_before: Mapped[float] = mapped_column(Float)
    score_after: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    max_parallel: Mapped[int | None] = mapped_column(Integer)
    progress: Mapped[dict[str, dict[str, object]]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class TokenRow(Base):
    """An API token. Only the sha256 of its secret is kept: the secret is shown once, when created."""

    __tablename__ = "tokens"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    project: Mapped[str] = mapped_column(String(63), ForeignKey("projects.name"))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(String(32)))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Set by DELETE /v1/tokens/{id}; the row stays, so that the audit trail's token ids keep a name.
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AuditRow(Base):
    """One mutating API request: who (token, project), what (action, target) and how it ended (status)."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    token_id: Mapped[str | None] = mapped_column(String(64))
    project: Mapped[str | None] = mapped_column(String(63))
    action: Mapped[str] = mapped_column(String(128))
    target: Mapped[str] = mapped_column(String(512))
    status: Mapped[int] = mapped_column(Integer)

    __table_args__ = (Index("ix_audit_project", "project", "id"),)


class ReservationRow(Base):
    """Capacity held for a project: ``count`` slots of the same size, placed by the scheduler as VMs
    are (vmsched_domain.reservations). Only VMs of its project naming it may use the slots."""

    __tablename__ = "reservations"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project: Mapped[str] = mapped_column(String(63), ForeignKey("projects.name"))
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str | None] = mapped_column(Text)
    cpu: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(BigInteger)
    disk_gb: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, server_default="0")
    count: Mapped[int] = mapped_column(Integer, server_default="1")
    host_selector: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    # The decision record of its placement (why it is unschedulable, when it is).
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    ends_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        Index("ix_reservations_project_created", "project", "created_at", "id"),
        Index(
            "ix_reservations_open",
            "updated_at",
            postgresql_where=text("status IN ('pending', 'held', 'unschedulable')"),
        ),
    )


class ReservationSlotRow(Base):
    """One VM's room a reservation holds on a host: ``held`` (counted in the host's ``alloc_*``, its
    claim in Redis keyed by the slot id), ``used`` (a VM took the room: ``vm_id``) or ``released``."""

    __tablename__ = "reservation_slots"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    reservation_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("reservations.id", ondelete="CASCADE")
    )
    hypervisor_id: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    cpu: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(BigInteger)
    disk_gb: Mapped[int] = mapped_column(BigInteger)
    gpu: Mapped[int] = mapped_column(Integer, server_default="0")
    vm_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # The slot's decision record (journal entry included): a VM taking the slot records it as its own.
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSONB)

    __table_args__ = (
        Index("ix_reservation_slots_reservation", "reservation_id", "status"),
        Index("ix_reservation_slots_held", "hypervisor_id", postgresql_where=text("status = 'held'")),
    )


class DecisionJournalEntry(Base):
    """One entry of a scheduler replica's decision journal (:mod:`vmsched_placement.journal`): a
    checkpoint (every host whole) or one decision's delta, request and context, zlib-packed JSON."""

    __tablename__ = "decision_journal"
    __table_args__ = (Index("decision_journal_checkpoints", "replica", "seq", postgresql_where=text("checkpoint")),)

    replica: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    checkpoint: Mapped[bool] = mapped_column(Boolean)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
