"""The scheduler's reads and writes in PostgreSQL, the truth.

``commit_placement`` is the guard that makes overcommit impossible: in one transaction the VM moves
from ``pending`` to ``scheduled`` and the host's allocations grow, and the host row is updated only
if the result stays within capacity (times its overcommit ratio) and the host is online and not
paused. Concurrent placements on one host queue on its row lock and re-check the condition.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_common.messages import Resources
from vmsched_common.settings import Strategy

_COMMIT_PLACEMENT = text(
    """
    WITH vm AS (
        UPDATE vms
           SET status = 'scheduled', hypervisor_id = :host_id, strategy = :strategy, scheduled_at = now(),
               updated_at = now(), status_reason = NULL, placement = CAST(:placement AS jsonb)
         WHERE id = :vm_id AND status = 'pending' AND attempt = :attempt
     RETURNING created_at, scheduled_at
    ), host AS (
        UPDATE hosts
           SET alloc_cpu = alloc_cpu + :cpu, alloc_memory_mb = alloc_memory_mb + :memory_mb,
               alloc_disk_gb = alloc_disk_gb + :disk_gb, alloc_gpu = alloc_gpu + :gpu, vm_count = vm_count + 1
         WHERE id = :host_id AND EXISTS (SELECT 1 FROM vm)
           AND status = 'online' AND NOT scheduling_paused
           AND alloc_cpu + :cpu <= floor(cpu * cpu_ratio + 1e-9)
           AND alloc_memory_mb + :memory_mb <= floor(memory_mb * memory_ratio + 1e-9)
           AND alloc_disk_gb + :disk_gb <= disk_gb
           AND alloc_gpu + :gpu <= gpu
     RETURNING id
    )
    SELECT (SELECT created_at FROM vm) AS created_at, (SELECT scheduled_at FROM vm) AS scheduled_at,
           EXISTS (SELECT 1 FROM host) AS host_ok
    """
)

# A batch of placements in one statement. The hosts are locked first, in id order, so that two
# replicas committing batches that share hosts queue on each other instead of deadlocking.
_LOCK_HOSTS = text("SELECT id FROM hosts WHERE id = ANY(CAST(:hosts AS text[])) ORDER BY id FOR UPDATE")
# Only VMs still pending at their attempt move; each host then grows by the sum of what moved onto
# it, under the same guard as one placement. ``hosts_ok < hosts_needed``: some host refused, and the
# caller rolls the whole batch back (the VMs are then placed one by one, which finds the culprit).
_COMMIT_PLACEMENTS = text(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:vm_ids AS uuid[]), CAST(:attempts AS int[]), CAST(:hosts AS text[]),
                             CAST(:strategies AS text[]), CAST(:placements AS text[]), CAST(:cpu AS int[]),
                             CAST(:memory_mb AS bigint[]), CAST(:disk_gb AS bigint[]), CAST(:gpu AS int[]))
               AS i(vm_id, attempt, host_id, strategy, placement, cpu, memory_mb, disk_gb, gpu)
    ), vm AS (
        UPDATE vms v
           SET status = 'scheduled', hypervisor_id = i.host_id, strategy = i.strategy, scheduled_at = now(),
               updated_at = now(), status_reason = NULL, placement = CAST(i.placement AS jsonb)
          FROM input i
         WHERE v.id = i.vm_id AND v.status = 'pending' AND v.attempt = i.attempt
     RETURNING v.id, v.created_at, v.scheduled_at, i.host_id, i.cpu, i.memory_mb, i.disk_gb, i.gpu
    ), need AS (
        SELECT host_id, sum(cpu) AS cpu, sum(memory_mb) AS memory_mb, sum(disk_gb) AS disk_gb,
               sum(gpu) AS gpu, count(*) AS vms
          FROM vm GROUP BY host_id
    ), host AS (
        UPDATE hosts h
           SET alloc_cpu = h.alloc_cpu + n.cpu, alloc_memory_mb = h.alloc_memory_mb + n.memory_mb,
               alloc_disk_gb = h.alloc_disk_gb + n.disk_gb, alloc_gpu = h.alloc_gpu + n.gpu,
               vm_count = h.vm_count + n.vms
          FROM need n
         WHERE h.id = n.host_id
           AND h.status = 'online' AND NOT h.scheduling_paused
           AND h.alloc_cpu + n.cpu <= floor(h.cpu * h.cpu_ratio + 1e-9)
           AND h.alloc_memory_mb + n.memory_mb <= floor(h.memory_mb * h.memory_ratio + 1e-9)
           AND h.alloc_disk_gb + n.disk_gb <= h.disk_gb
           AND h.alloc_gpu + n.gpu <= h.gpu
     RETURNING h.id
    )
    SELECT vm.id, vm.created_at, vm.scheduled_at,
           (SELECT count(*) FROM host) AS hosts_ok, (SELECT count(*) FROM need) AS hosts_needed
      FROM vm
    """
)

_MARK_UNSCHEDULABLE = text(
    """
    UPDATE vms SET status = 'unschedulable', status_reason = :reason, strategy = :strategy,
                   placement = CAST(:placement AS jsonb), updated_at = now()
     WHERE id = :vm_id AND status = 'pending' AND attempt = :attempt
    RETURNING id
    """
)

_LOAD_VM = text(
    """
    SELECT id, name, status, hypervisor_id, attempt, strategy, status_reason, scheduled_at, placement,
           cpu, memory_mb, disk_gb, gpu
      FROM vms WHERE id = :vm_id
    """
)

_ONLINE_HOSTS = text("SELECT count(*) FROM hosts WHERE status = 'online' AND NOT scheduling_paused")

_DEFAULT_STRATEGY = text("SELECT value FROM scheduler_settings WHERE key = 'default_strategy'")


class CommitOutcome(enum.Enum):
    PLACED = "placed"
    VM_NOT_PENDING = "vm_not_pending"
    HOST_REFUSED = "host_refused"


@dataclass(frozen=True, slots=True)
class CommitResult:
    outcome: CommitOutcome
    created_at: datetime | None = None
    scheduled_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PendingCommit:
    """One placement for :meth:`SchedulerStore.commit_placements`."""

    vm_id: UUID
    attempt: int
    host_id: str
    resources: Resources
    strategy: Strategy
    placement: dict[str, Any]


@dataclass(frozen=True, slots=True)
class VmRecord:
    id: UUID
    name: str
    status: str
    hypervisor_id: str | None
    attempt: int
    strategy: str | None
    status_reason: str | None
    scheduled_at: datetime | None
    placement: dict[str, Any] | None
    resources: Resources


class SchedulerStore:
    def __init__(self, engine: AsyncEngine, *, default_strategy: Strategy, strategy_ttl: float = 2.0) -> None:
        self.engine = engine
        self._configured_default = default_strategy
        self._cached_default: tuple[float, Strategy] | None = None
        self._strategy_ttl = strategy_ttl

    async def commit_placement(
        self,
        vm_id: UUID,
        attempt: int,
        host_id: str,
        resources: Resources,
        strategy: Strategy,
        placement: dict[str, Any],
    ) -> CommitResult:
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(
                    _COMMIT_PLACEMENT,
                    {
                        "vm_id": vm_id,
                        "attempt": attempt,
                        "host_id": host_id,
                        "strategy": strategy.value,
                        "placement": json.dumps(placement),
                        "cpu": resources.cpu,
                        "memory_mb": resources.memory_mb,
                        "disk_gb": resources.disk_gb,
                        "gpu": resources.gpu,
                    },
                )
            ).one()
            if row.created_at is None:
                await connection.rollback()
                return CommitResult(CommitOutcome.VM_NOT_PENDING)
            if not row.host_ok:
                await connection.rollback()
                return CommitResult(CommitOutcome.HOST_REFUSED)
            await connection.commit()
            return CommitResult(CommitOutcome.PLACED, row.created_at, row.scheduled_at)

    async def commit_placements(self, placements: Sequence[PendingCommit]) -> list[CommitResult] | None:
        """Many :meth:`commit_placement` in one transaction and one statement, all or nothing.

        Per placement, PLACED or VM_NOT_PENDING; None when a host refused (nothing was written)."""
        if not placements:
            return []
        params = {
            "vm_ids": [p.vm_id for p in placements],
            "attempts": [p.attempt for p in placements],
            "hosts": [p.host_id for p in placements],
            "strategies": [p.strategy.value for p in placements],
            "placements": [json.dumps(p.placement) for p in placements],
            "cpu": [p.resources.cpu for p in placements],
            "memory_mb": [p.resources.memory_mb for p in placements],
            "disk_gb": [p.resources.disk_gb for p in placements],
            "gpu": [p.resources.gpu for p in placements],
        }
        async with self.engine.connect() as connection:
            await connection.execute(_LOCK_HOSTS, {"hosts": sorted({p.host_id for p in placements})})
            rows = (await connection.execute(_COMMIT_PLACEMENTS, params)).all()
            if rows and rows[0].hosts_ok < rows[0].hosts_needed:
                await connection.rollback()
                return None
            await connection.commit()
        placed = {row.id: row for row in rows}
        results = []
        for p in placements:
            row = placed.get(p.vm_id)
            if row is None:
                results.append(CommitResult(CommitOutcome.VM_NOT_PENDING))
            else:
                results.append(CommitResult(CommitOutcome.PLACED, row.created_at, row.scheduled_at))
        return results

    async def mark_unschedulable(
        self, vm_id: UUID, attempt: int, reason: str, strategy: Strategy, placement: dict[str, Any]
    ) -> bool:
        async with self.engine.begin() as connection:
            result = await connection.execute(
                _MARK_UNSCHEDULABLE,
                {
                    "vm_id": vm_id,
                    "attempt": attempt,
                    "reason": reason,
                    "strategy": strategy.value,
                    "placement": json.dumps(placement),
                },
            )
            return result.first() is not None

    async def load_vm(self, vm_id: UUID) -> VmRecord | None:
        async with self.engine.connect() as connection:
            row = (await connection.execute(_LOAD_VM, {"vm_id": vm_id})).first()
        if row is None:
            return None
        return VmRecord(
            id=row.id,
            name=row.name,
            status=row.status,
            hypervisor_id=row.hypervisor_id,
            attempt=row.attempt,
            strategy=row.strategy,
            status_reason=row.status_reason,
            scheduled_at=row.scheduled_at,
            placement=row.placement,
            resources=Resources(cpu=row.cpu, memory_mb=row.memory_mb, disk_gb=row.disk_gb, gpu=row.gpu),
        )

    async def online_hosts(self) -> int:
        async with self.engine.connect() as connection:
            return int((await connection.execute(_ONLINE_HOSTS)).scalar_one())

    async def default_strategy(self) -> Strategy:
        """The cluster default: set at runtime in PostgreSQL, else VMSCHED_SCHEDULING_STRATEGY. Cached briefly."""
        now = time.monotonic()
        if self._cached_default is not None and now - self._cached_default[0] < self._strategy_ttl:
            return self._cached_default[1]
        async with self.engine.connect() as connection:
            value = (await connection.execute(_DEFAULT_STRATEGY)).scalar()
        strategy = Strategy(value) if value in {s.value for s in Strategy} else self._configured_default
        self._cached_default = (now, strategy)
        return strategy
