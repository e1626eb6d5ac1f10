"""The API's reads and writes in PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_api.cursors import decode_cursor, encode_cursor
from vmsched_api.inventory import OperatorFields, patched
from vmsched_contract.api import Host, HostPatch, HostUsage, RatioOverrides, Vm
from vmsched_contract.fencing import FencedBy
from vmsched_contract.messages import HostStatus
from vmsched_contract.status import DrainState, VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_domain.fit import RESOURCES
from vmsched_domain.inventory import RATIOS
from vmsched_domain.records import HostRecord, VmRecord
from vmsched_domain.usage import MeasuredUsage
from vmsched_pg import vm_actions
from vmsched_pg.engine import retry_on_dead_connection
from vmsched_pg.inventory import overlay
from vmsched_pg.models import SchedulerSettingRow
from vmsched_pg.rows import HOST_COLUMNS, HOST_FIELDS, VM_COLUMNS, host_from_row, vm_from_row
from vmsched_pg.shares import HOLDINGS
from vmsched_pg.vm_actions import PowerAction

_VM_SELECT = f"SELECT {VM_COLUMNS}, idempotency_key, request_hash FROM vms"

_LOCK_HOST = text(f"SELECT {HOST_COLUMNS} FROM hosts WHERE id = :id FOR UPDATE")
_COUNT_RUNNING_ON = text("SELECT count(*) FROM vms WHERE hypervisor_id = :host AND status IN ('running', 'migrating')")
# What a PATCH writes (the operator's fields), with each one's SQL type.
_PATCH_COLUMNS: dict[str, str] = {
    "operator_labels": "jsonb",
    "operator_taints": "jsonb",
    **{f"operator_{column}": "float8" for column, _ in RATIOS},
    **{f"reserved_{rule.field}": "bigint" for rule in RESOURCES},
    "scheduling_paused": "boolean",
    "dedicated_to": "text",
}
# The operator's fields, and the effective columns overlaid from them and the agent's.
_PATCH_HOST = text(
    f"""
    UPDATE hosts h SET {", ".join(f"{name} = n.{name}" for name in _PATCH_COLUMNS)}, {overlay(agent="h", operator="n")}
      FROM (SELECT {", ".join(f"CAST(:{name} AS {kind}) AS {name}" for name, kind in _PATCH_COLUMNS.items())}) n
     WHERE h.id = :id
    RETURNING {", ".join(f"h.{name}" for name in HOST_FIELDS)}
    """
)
# What occupies a host: the VMs holding its capacity (a VM migrating to it too), and a reservation's
# held slot (its id is the slot's: end the reservation first). Failed and unschedulable VMs hold none
# (a restart is placed anew, and a placement on a deleted host is refused).
_OCCUPANTS = text(f"SELECT DISTINCT vm_id FROM ({HOLDINGS}) holdings WHERE host_id = :id ORDER BY vm_id LIMIT 10")


class HostRemoval(StrEnum):
    DELETED = "deleted"
    UNKNOWN = "unknown"
    OCCUPIED = "occupied"


def to_vm(vm: VmRecord) -> Vm:
    return Vm(
        id=vm.id,
        name=vm.name,
        status=vm.status,
        hypervisor_id=vm.hypervisor_id,
        status_reason=vm.status_reason,
        cpu=vm.resources.cpu,
        memory_mb=vm.resources.memory_mb,
        disk_gb=vm.resources.disk_gb,
        gpu=vm.resources.gpu,
        extra=dict(vm.resources.extra),
        volumes=list(vm.volumes),
        labels=dict(vm.labels),
        host_selector=list(vm.host_selector),
        tolerations=list(vm.tolerations),
        networks=list(vm.networks),
        dedicated=vm.dedicated,
        planner=vm.planner,
        strategy=vm.strategy,
        restart_policy=vm.restart_policy,
        restart_count=vm.restart_count,
        attempt=vm.attempt,
        attempts=vm.attempts,
        created_at=vm.created_at,
        scheduled_at=vm.scheduled_at,
        started_at=vm.started_at,
        server_group=vm.server_group,
        wait_s=vm.wait_s,
        wait_until=vm.wait_until,
        gang_id=vm.gang_id,
        priority=vm.priority,
        preempted_by=vm.preempted_by,
        project=vm.project,
        task=vm.task,
        migrations=vm.migrations,
        migration_target=vm.migration_target,
        reservation=vm.reservation,
    )


def to_host(host: HostRecord, usage: MeasuredUsage | None = None, drain: DrainState | None = None) -> Host:
    return Host(
        id=host.id,
        status=host_status(HostStatus(host.status), drain),
        labels=dict(host.labels),
        operator_labels=dict(host.operator_labels),
        taints=list(host.taints),
        operator_taints=None if host.operator_taints is None else list(host.operator_taints),
        capacity=host.capacity,
        allocated=host.allocated,
        overcommit=host.overcommit,
        operator_overcommit=RatioOverrides(
            cpu=host.operator_overcommit.cpu, memory=host.operator_overcommit.memory, disk=host.operator_overcommit.disk
        ),
        reserved=host.reserved,
        vm_count=host.vm_count,
        last_heartbeat=host.last_heartbeat,
        scheduling_paused=host.scheduling_paused,
        capabilities=list(host.capabilities),
        networks=list(host.networks),
        dedicated_to=host.dedicated_to,
        fenced_at=host.fenced_at,
        fenced_by=None if host.fenced_by is None else FencedBy(host.fenced_by),
        storage_pools=list(host.storage_pools),
        usage=None
        if usage is None
        else HostUsage(
            cpu_used=usage.cpu_used,
            memory_used_mb=usage.memory_used_mb,
            allocated_cpu=usage.allocated_cpu,
            allocated_memory_mb=usage.allocated_memory_mb,
        ),
    )


def host_status(reported: HostStatus, drain: DrainState | None) -> HostStatus:
    """What a host's agent says, unless an operator's drain empties it: ``draining`` until nothing is
    on it, then ``drained`` (a silent host stays ``offline`` and a fenced one ``fenced`` whatever its drain)."""
    if drain is None or reported in (HostStatus.OFFLINE, HostStatus.FENCED):
        return reported
    return HostStatus.DRAINED if drain is DrainState.DRAINED else HostStatus.DRAINING


class Repository:
    """Every method is one unit of work, run again once if its pooled connection was dead."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def get_vm(self, vm_id: UUID, project: str | None = None) -> VmRecord | None:
        """The VM, if it is ``project``'s (any project's for None)."""
        async with self.engine.connect() as connection:
            row = (await connection.execute(text(f"{_VM_SELECT} WHERE id = :id"), {"id": vm_id})).first()
        if row is None or (project is not None and row.project != project):
            return None
        return vm_from_row(row)

    @retry_on_dead_connection
    async def get_vms(self, vm_ids: Sequence[UUID], project: str | None = None) -> dict[UUID, VmRecord]:
        """Those of the VMs that exist and are ``project``'s (any project's for None), by id."""
        if not vm_ids:
            return {}
        query = text(f"{_VM_SELECT} WHERE id = ANY(CAST(:ids AS uuid[]))")
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query, {"ids": list(vm_ids)})).all()
        return {row.id: vm_from_row(row) for row in rows if project is None or row.project == project}

    @retry_on_dead_connection
    async def list_vms(
        self,
        *,
        status: VmStatus | None,
        hypervisor_id: str | None,
        limit: int,
        cursor: str | None,
        project: str | None = None,
    ) -> tuple[list[Vm], str | None]:
        """A page of VMs in creation order; only ``project``'s unless None."""
        clauses = []
        params: dict[str, Any] = {"limit": limit + 1}
        if project is not None:
            clauses.append("project = :project")
            params["project"] = project
        if status is not None:
            clauses.append("status = :status")
            params["status"] = status.value
        if hypervisor_id is not None:
            clauses.append("hypervisor_id = :hypervisor_id")
            params["hypervisor_id"] = hypervisor_id
        if cursor is not None:
            params["after_created"], params["after_id"] = decode_cursor(cursor)
            clauses.append("(created_at, id) > (:after_created, :after_id)")
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        query = text(f"{_VM_SELECT} {where} ORDER BY created_at, id LIMIT :limit")
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query, params)).all()
        items = [to_vm(vm_from_row(row)) for row in rows[:limit]]
        next_cursor = encode_cursor(rows[limit - 1].created_at, rows[limit - 1].id) if len(rows) > limit else None
        return items, next_cursor

    @retry_on_dead_connection
    async def request_migration(
        self, vm_id: UUID, target_host: str | None, project: str | None = None
    ) -> VmRecord | None:
        """:func:`vmsched_pg.vm_actions.start_migration`."""
        return await vm_actions.start_migration(self.engine, vm_id, target_host, project)

    @retry_on_dead_connection
    async def request_power(self, vm_id: UUID, action: PowerAction, project: str | None = None) -> VmRecord | None:
        """:func:`vmsched_pg.vm_actions.request_power`."""
        return await vm_actions.request_power(self.engine, vm_id, action, project)

    @retry_on_dead_connection
    async def list_hosts(self) -> list[HostRecord]:
        async with self.engine.connect() as connection:
            rows = (await connection.execute(text(f"SELECT {HOST_COLUMNS} FROM hosts ORDER BY id"))).all()
        return [host_from_row(row) for row in rows]

    @retry_on_dead_connection
    async def count_waiting(self) -> int:
        """How many VMs wait for room (a partial index holds exactly them)."""
        async with self.engine.connect() as connection:
            count = (
                await connection.execute(
                    text("SELECT count(*) FROM vms WHERE status = :waiting"), {"waiting": "waiting"}
                )
            ).scalar_one()
        return int(count)

    @retry_on_dead_connection
    async def count_running_on(self, host_id: str) -> int:
        """The VMs running on the host: ``running``, or ``migrating`` away from it (still running there)."""
        async with self.engine.connect() as connection:
            count = (await connection.execute(_COUNT_RUNNING_ON, {"host": host_id})).scalar_one()
        return int(count)

    @retry_on_dead_connection
    async def get_host(self, host_id: str) -> HostRecord | None:
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(text(f"SELECT {HOST_COLUMNS} FROM hosts WHERE id = :id"), {"id": host_id})
            ).first()
        return host_from_row(row) if row else None

    @retry_on_dead_connection
    async def patch_host(self, host_id: str, patch: HostPatch) -> HostRecord | None:
        """Apply an operator's patch under the host's row lock (a heartbeat's upsert waits for it, and
        then overlays the agent's values with these); the host as it is now, None if unknown."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(_LOCK_HOST, {"id": host_id})).first()
            if row is None:
                return None
            fields = patched(OperatorFields.of(host_from_row(row)), patch)
            row = (await connection.execute(_PATCH_HOST, {"id": host_id, **fields.params()})).one()
        return host_from_row(row)

    @retry_on_dead_connection
    async def delete_host(self, host_id: str) -> tuple[HostRemoval, list[UUID]]:
        """Delete a host that no VM occupies. Under the host's row lock: a scheduler settling a VM on
        it waits for this, then finds no host and is refused (its VM is decided again); one that
        settled first is seen here."""
        async with self.engine.begin() as connection:
            if (await connection.execute(_LOCK_HOST, {"id": host_id})).first() is None:
                return HostRemoval.UNKNOWN, []
            occupants = [row.vm_id for row in await connection.execute(_OCCUPANTS, {"id": host_id})]
            if occupants:
                return HostRemoval.OCCUPIED, occupants
            await connection.execute(text("DELETE FROM hosts WHERE id = :id"), {"id": host_id})
        return HostRemoval.DELETED, []

    @retry_on_dead_connection
    async def default_strategy(self) -> Strategy | None:
        async with self.engine.connect() as connection:
            value = (
                await connection.execute(text("SELECT value FROM scheduler_settings WHERE key = 'default_strategy'"))
            ).scalar()
        return Strategy(value) if value else None

    @retry_on_dead_connection
    async def set_default_strategy(self, strategy: Strategy) -> None:
        statement = insert(SchedulerSettingRow).values(key="default_strategy", value=strategy.value)
        statement = statement.on_conflict_do_update(
            index_elements=["key"], set_={"value": strategy.value, "updated_at": text("now()")}
        )
        async with self.engine.begin() as connection:
            await connection.execute(statement)
