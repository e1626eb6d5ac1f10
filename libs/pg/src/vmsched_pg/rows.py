"""One row mapper per table: the columns every statement selects of a VM, a host, a server group or a
reservation, and the one function that turns such a row into its entity (:mod:`vmsched_domain.records`).

Statements select :data:`VM_COLUMNS` (or ``vms.*``) and :data:`HOST_COLUMNS`, and turn each row into
a :class:`~vmsched_domain.records.VmRecord` or :class:`~vmsched_domain.records.HostRecord` with
:func:`vm_from_row` or :func:`host_from_row`; nothing else reads the columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import (
    HostSelectorTerm,
    Overcommit,
    Resources,
    RestartPolicy,
    SelectorOperator,
)
from vmsched_contract.planner import Planner
from vmsched_contract.status import ReservationStatus, Task, VmStatus
from vmsched_contract.storage import PlacedVolume, PoolKind, StoragePool
from vmsched_contract.strategy import Strategy
from vmsched_domain.groups import GroupRule
from vmsched_domain.inventory import RATIOS, RatioOverrides, taints_of, tolerations_of
from vmsched_domain.records import HostRecord, ReservationRecord, ServerGroupRecord, VmRecord

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
    "volumes",
    "labels",
    "host_selector",
    "tolerations",
    "networks",
    "dedicated",
    "planner",
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
    "preemption",
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
    "networks",
    "dedicated_to",
    "fenced_at",
    "fenced_by",
    "storage_pools",
)
HOST_COLUMNS = ", ".join(HOST_FIELDS)

SERVER_GROUP_FIELDS = (
    "id",
    "name",
    "policy",
    "topology_key",
    "max_per_domain",
    "max_skew",
    "created_at",
    "project",
    "max_unavailable",
)
SERVER_GROUP_COLUMNS = ", ".join(SERVER_GROUP_FIELDS)

RESERVATION_FIELDS = (
    "id",
    "project",
    "status",
    "status_reason",
    "cpu",
    "memory_mb",
    "disk_gb",
    "gpu",
    "count",
    "host_selector",
    "placement",
    "ends_at",
    "created_at",
    "updated_at",
)


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


def vm_from_row(row: Any) -> VmRecord:
    return VmRecord(
        id=row.id,
        name=row.name,
        status=VmStatus(row.status),
        status_reason=row.status_reason,
        hypervisor_id=row.hypervisor_id,
        resources=trusted(row.cpu, row.memory_mb, row.disk_gb, row.gpu, row.extra),
        labels=dict(row.labels or {}),
        host_selector=trusted_selector(row.host_selector),
        tolerations=tolerations_of(row.tolerations),
        networks=tuple(row.networks or ()),
        dedicated=row.dedicated,
        planner=Planner(row.planner),
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
        preemption=row.preemption,
        project=row.project,
        task=Task(row.task) if row.task else None,
        task_since=row.task_since,
        migrations=row.migrations,
        target_host=row.target_host,
        migration_target=row.migration_target,
        reservation=row.reservation,
        volumes=trusted_volumes(row.volumes),
    )


def trusted_volumes(volumes: list[dict[str, Any]] | None) -> tuple[PlacedVolume, ...]:
    """A VM's volumes read back from their column (only validated ones reach it), built as ``trusted``."""
    return tuple(
        PlacedVolume.model_construct(
            size_gb=v["size_gb"], tags=list(v.get("tags", [])), pool=v.get("pool"), shared=v.get("shared")
        )
        for v in volumes or ()
    )


def ratio_overrides_of_row(row: Any) -> RatioOverrides:
    """The allocation ratios the operator set, from a host row's ``operator_*_ratio`` columns."""
    return RatioOverrides(**{name: getattr(row, f"operator_{column}") for column, name in RATIOS})


def host_from_row(row: Any) -> HostRecord:
    return HostRecord(
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
        operator_overcommit=ratio_overrides_of_row(row),
        capabilities=tuple(row.capabilities or ()),
        networks=tuple(row.networks or ()),
        dedicated_to=row.dedicated_to,
        fenced_at=row.fenced_at,
        fenced_by=row.fenced_by,
        storage_pools=tuple(
            StoragePool.model_construct(
                name=p["name"], kind=PoolKind(p["kind"]), capacity_gb=p.get("capacity_gb"), tags=list(p.get("tags", []))
            )
            for p in row.storage_pools or ()
        ),
    )


def server_group_from_row(row: Any) -> ServerGroupRecord:
    return ServerGroupRecord(
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
        max_unavailable=row.max_unavailable,
    )


def reservation_from_row(row: Any) -> ReservationRecord:
    """A reservation as :data:`vmsched_pg.reservation_store.SELECT_RESERVATIONS` selects it (with
    ``held``, ``used`` and ``hosts``)."""
    return ReservationRecord(
        id=row.id,
        project=row.project,
        status=ReservationStatus(row.status),
        status_reason=row.status_reason,
        resources=trusted(row.cpu, row.memory_mb, row.disk_gb, row.gpu),
        count=row.count,
        host_selector=trusted_selector(row.host_selector),
        placement=row.placement,
        ends_at=row.ends_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        held=int(row.held),
        used=int(row.used),
        hosts=tuple(sorted(row.hosts or ())),
        lost=int(row.lost),
    )
