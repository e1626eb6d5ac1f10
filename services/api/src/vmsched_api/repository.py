"""The API's reads and writes in PostgreSQL."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_api import quota
from vmsched_api.cursors import decode_cursor, encode_cursor
from vmsched_api.group_store import check_groups_exist
from vmsched_api.inventory import OperatorFields, patched
from vmsched_api.request_phases import Phase, timed
from vmsched_api.reservation_store import check_reservations_fit
from vmsched_api.schemas import Host, HostPatch, HostUsage, RatioOverrides, Vm, VmDefaults, VmRequest
from vmsched_common.db import moves, vm_writes
from vmsched_common.db.engine import retry_on_dead_connection
from vmsched_common.db.inventory import RATIOS, overlay
from vmsched_common.db.models import SchedulerSettingRow, VmRow
from vmsched_common.db.moves import PowerAction
from vmsched_common.db.records import HOST_COLUMNS, HOST_FIELDS, VM_COLUMNS, VM_FIELDS, HostRecord, VmRecord
from vmsched_common.db.shares import HOLDINGS
from vmsched_common.drain import DrainState
from vmsched_common.fit import RESOURCES
from vmsched_common.lifecycle import VmStatus
from vmsched_common.messages import DEFAULT_PROJECT, HostStatus
from vmsched_common.settings import Strategy
from vmsched_common.snapshot import MeasuredUsage
from vmsched_common.vm_changes import Change, delete_requested

_VM_SELECT = f"SELECT {VM_COLUMNS}, idempotency_key, request_hash FROM vms"

_LOCK_HOST = text(f"SELECT {HOST_COLUMNS} FROM hosts WHERE id = :id FOR UPDATE")
# What a PATCH writes (the operator's fields), with each one's SQL type.
_PATCH_COLUMNS: dict[str, str] = {
    "operator_labels": "jsonb",
    "operator_taints": "jsonb",
    **{f"operator_{column}": "float8" for column, _ in RATIOS},
    **{f"reserved_{rule.field}": "bigint" for rule in RESOURCES},
    "scheduling_paused": "boolean",
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


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request body."""


def request_hash(body: VmRequest) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def _wait_s(body: VmRequest, defaults: VmDefaults) -> int:
    """How long the VM may wait for room; a VM naming a reservation waits for none (its room is a
    slot, there or not)."""
    return 0 if body.reservation is not None else body.waits(defaults)


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
        labels=dict(vm.labels),
        host_selector=list(vm.host_selector),
        tolerations=list(vm.tolerations),
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
    on it, then ``drained`` (a silent host stays ``offline`` whatever its drain)."""
    if drain is None or reported is HostStatus.OFFLINE:
        return reported
    return HostStatus.DRAINED if drain is DrainState.DRAINED else HostStatus.DRAINING


class Repository:
    """Every method is one unit of work, run again once if its pooled connection was dead."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def create_vms(
        self,
        bodies: Sequence[VmRequest],
        idempotency_key: str | None = None,
        *,
        defaults: VmDefaults,
        all_or_nothing: bool = False,
        project: str = DEFAULT_PROJECT,
    ) -> tuple[list[VmRecord], bool]:
        """Insert pending VMs in one statement, with ``defaults`` for the amounts a body leaves out
        (the row holds what the VM got); ``all_or_nothing``: as one gang, which never waits. Returns
        (the VMs, replayed: an earlier request's); the idempotency hash is the body's, so a replay
        matches whatever the defaults are by then. Raises QuotaExceeded (nothing inserted) when the
        VMs would take ``project`` past a limit of its quota."""
        accepted = datetime.now(UTC)
        gang = uuid.uuid4() if all_or_nothing else None
        if all_or_nothing:
            defaults = replace(defaults, wait_s=0)
        values = [
            {
                "id": uuid.uuid4(),
                "name": body.name,
                "status": VmStatus.PENDING.value,
                "cpu": body.resources(defaults).cpu,
                "memory_mb": body.resources(defaults).memory_mb,
                "disk_gb": body.disk_gb,
                "gpu": body.gpu,
                "extra": body.extra,
                "labels": body.labels,
                "host_selector": [term.model_dump(mode="json") for term in body.host_selector],
                "tolerations": [toleration.model_dump(mode="json") for toleration in body.tolerations],
                "strategy": body.strategy.value if body.strategy else None,
                "restart_policy": body.restart_policy.value,
                "idempotency_key": idempotency_key,
                "request_hash": request_hash(body) if idempotency_key else None,
                "server_group": body.server_group,
                "wait_s": _wait_s(body, defaults),
                "wait_until": accepted + timedelta(seconds=_wait_s(body, defaults))
                if _wait_s(body, defaults)
                else None,
                "gang_id": gang,
                "priority": body.priority,
                "project": project,
                "reservation": body.reservation,
            }
            for body in bodies
        ]
        # executemany form: one compiled (and cached) statement sent as multi-row VALUES pages,
        # rows returned in the order given. A .values([...]) statement is compiled anew for every
        # batch size, which cost a fifth of the API's CPU under load.
        inserting = insert(VmRow)
        if idempotency_key is not None:
            inserting = inserting.on_conflict_do_nothing(index_elements=["project", "idempotency_key"])
        statement = inserting.returning(
            *(VmRow.__table__.c[name] for name in VM_FIELDS), quota.LIMITED, sort_by_parameter_order=True
        )
        with timed(Phase.COMMIT):
            return await self._insert(statement, values, bodies, idempotency_key, defaults, project)

    async def _insert(
        self,
        statement: Any,
        values: list[dict[str, Any]],
        bodies: Sequence[VmRequest],
        idempotency_key: str | None,
        defaults: VmDefaults,
        project: str,
    ) -> tuple[list[VmRecord], bool]:
        async with self.engine.begin() as connection:
            with timed(Phase.CHECKS):
                await check_groups_exist(connection, [body.server_group for body in bodies], project)
                await check_reservations_fit(connection, bodies, defaults, project)
            rows = (await connection.execute(statement, values)).all()
            with timed(Phase.CHECKS):
                await quota.enforce(connection, project, rows)
            if not rows and idempotency_key is not None:
                existing = (
                    await connection.execute(
                        text(f"{_VM_SELECT} WHERE project = :project AND idempotency_key = :key"),
                        {"project": project, "key": idempotency_key},
                    )
                ).one()
                if existing.request_hash != request_hash(bodies[0]):
                    raise IdempotencyConflict(idempotency_key)
                return [VmRecord.from_row(existing)], True
        return [VmRecord.from_row(row) for row in rows], False

    @retry_on_dead_connection
    async def get_vm(self, vm_id: UUID, project: str | None = None) -> VmRecord | None:
        """The VM, if it is ``project``'s (any project's for None)."""
        async with self.engine.connect() as connection:
            row = (await connection.execute(text(f"{_VM_SELECT} WHERE id = :id"), {"id": vm_id})).first()
        if row is None or (project is not None and row.project != project):
            return None
        return VmRecord.from_row(row)

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
        items = [to_vm(VmRecord.from_row(row)) for row in rows[:limit]]
        next_cursor = encode_cursor(rows[limit - 1].created_at, rows[limit - 1].id) if len(rows) > limit else None
        return items, next_cursor

    @retry_on_dead_connection
    async def request_delete(self, vm_id: UUID, project: str | None = None) -> tuple[VmRecord, Change | None] | None:
        """The lifecycle's ``delete_requested``: a VM on a host goes ``deleting`` (its agent must act),
        one on none ``deleted`` at once. Returns the VM as it is now and the change, if any; None if
        there is no such VM of ``project`` (of any project for None)."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(vm_writes.LOCK_VMS, {"ids": [vm_id]})).first()
            if row is None or (project is not None and row.project != project):
                return None
            vm = VmRecord.from_row(row)
            change = delete_requested(vm)
            if change is None or not await vm_writes.apply(connection, [change]):
                return vm, None
        return change.after, change

    @retry_on_dead_connection
    async def request_migration(
        self, vm_id: UUID, target_host: str | None, project: str | None = None
    ) -> VmRecord | None:
        """:func:`vmsched_common.db.moves.start_migration`."""
        return await moves.start_migration(self.engine, vm_id, target_host, project)

    @retry_on_dead_connection
    async def request_power(self, vm_id: UUID, action: PowerAction, project: str | None = None) -> VmRecord | None:
        """:func:`vmsched_common.db.moves.request_power`."""
        return await moves.request_power(self.engine, vm_id, action, project)

    @retry_on_dead_connection
    async def list_hosts(self) -> list[HostRecord]:
        async with self.engine.connect() as connection:
            rows = (await connection.execute(text(f"SELECT {HOST_COLUMNS} FROM hosts ORDER BY id"))).all()
        return [HostRecord.from_row(row) for row in rows]

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
    async def get_host(self, host_id: str) -> HostRecord | None:
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(text(f"SELECT {HOST_COLUMNS} FROM hosts WHERE id = :id"), {"id": host_id})
            ).first()
        return HostRecord.from_row(row) if row else None

    @retry_on_dead_connection
    async def patch_host(self, host_id: str, patch: HostPatch) -> HostRecord | None:
        """Apply an operator's patch under the host's row lock (a heartbeat's upsert waits for it, and
        then overlays the agent's values with these); the host as it is now, None if unknown."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(_LOCK_HOST, {"id": host_id})).first()
            if row is None:
                return None
            fields = patched(OperatorFields.of(HostRecord.from_row(row)), patch)
            row = (await connection.execute(_PATCH_HOST, {"id": host_id, **fields.params()})).one()
        return HostRecord.from_row(row)

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

    @retry_on_dead_connection
    async def ping(self) -> None:
        async with self.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
