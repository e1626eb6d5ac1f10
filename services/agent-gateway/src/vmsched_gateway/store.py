"""The gateway's writes to PostgreSQL: hosts from heartbeats, VM status from agents, lost hosts.

Every transition that frees capacity lowers the host's ``alloc_*`` in the same transaction as the
VM row, so PostgreSQL's allocations always equal the sum of the VMs holding capacity.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_common.messages import AgentHeartbeat, Resources
from vmsched_common.outbox import VM_COLUMNS, VmRow

_UPSERT_HOSTS = text(
    """
    INSERT INTO hosts (id, status, labels, cpu, memory_mb, disk_gb, gpu, cpu_ratio, memory_ratio, last_heartbeat)
    SELECT t.id, t.status, CAST(t.labels AS jsonb), t.cpu, t.memory_mb, t.disk_gb, t.gpu, t.cpu_ratio,
           t.memory_ratio, now()
      FROM unnest(CAST(:ids AS text[]), CAST(:statuses AS text[]), CAST(:labels AS text[]),
                  CAST(:cpus AS int[]), CAST(:memories AS bigint[]), CAST(:disks AS bigint[]),
                  CAST(:gpus AS int[]), CAST(:cpu_ratios AS float8[]), CAST(:memory_ratios AS float8[]))
           AS t(id, status, labels, cpu, memory_mb, disk_gb, gpu, cpu_ratio, memory_ratio)
    ON CONFLICT (id) DO UPDATE
       SET status = excluded.status, labels = excluded.labels, cpu = excluded.cpu,
           memory_mb = excluded.memory_mb, disk_gb = excluded.disk_gb, gpu = excluded.gpu,
           cpu_ratio = excluded.cpu_ratio, memory_ratio = excluded.memory_ratio,
           last_heartbeat = excluded.last_heartbeat
    RETURNING id, alloc_cpu, alloc_memory_mb, alloc_disk_gb, alloc_gpu, vm_count, scheduling_paused,
              extract(epoch FROM last_heartbeat) AS heartbeat_at, (xmax = 0) AS inserted
    """
)

# Rows are locked in id order, so two batches (or a batch and the health check) cannot deadlock.
_MARK_RUNNING = text(
    """
    WITH target AS (
        SELECT v.id FROM vms v
          JOIN unnest(CAST(:ids AS uuid[]), CAST(:agents AS text[])) AS r(id, agent_id)
            ON v.id = r.id AND v.hypervisor_id = r.agent_id
         WHERE v.status = 'scheduled'
         ORDER BY v.id
           FOR UPDATE OF v
    )
    UPDATE vms SET status = 'running', status_reason = NULL, updated_at = now()
      FROM target WHERE vms.id = target.id AND vms.status = 'scheduled'
    RETURNING vms.id
    """
)
# VMs an agent says it runs that PostgreSQL does not hold on that host (failed while the host was
# cut off, retried elsewhere, deleted): orphans holding capacity vmsched counts as free. VMs
# PostgreSQL has never heard of are left alone: the hypervisor may run VMs vmsched does not manage.
_ORPHANS = text(
    f"""
    SELECT r.host_id AS reported_by, {", ".join("v." + c.strip() for c in VM_COLUMNS.split(","))}
      FROM unnest(CAST(:hosts AS text[]), CAST(:vm_ids AS uuid[])) AS r(host_id, vm_id)
      JOIN vms v ON v.id = r.vm_id
     WHERE v.hypervisor_id IS DISTINCT FROM r.host_id
        OR v.status NOT IN ('scheduled', 'running', 'deleting')
    """
)
_SELECT_VMS = text(f"SELECT {VM_COLUMNS} FROM vms WHERE id = ANY(CAST(:ids AS uuid[]))")

_LOCK_VM = text(f"SELECT {VM_COLUMNS}, restart_policy, attempts FROM vms WHERE id = :vm_id FOR UPDATE")

_RELEASE_HOST = text(
    """
    UPDATE hosts SET alloc_cpu = alloc_cpu - :cpu, alloc_memory_mb = alloc_memory_mb - :memory_mb,
                     alloc_disk_gb = alloc_disk_gb - :disk_gb, alloc_gpu = alloc_gpu - :gpu,
                     vm_count = vm_count - 1
     WHERE id = :host_id
    """
)

_MARK_OFFLINE = text(
    """
    UPDATE hosts SET status = 'offline'
     WHERE status <> 'offline' AND (last_heartbeat IS NULL OR last_heartbeat < now() - make_interval(secs => :timeout))
    RETURNING id
    """
)

# Whether any agent at all was heard from within the timeout. When none was, the likelier story is
# that this gateway is cut off (a broker outage, a database stall), not that every host died at once:
# like Kubernetes' node controller in "full disruption", hosts are marked offline but their VMs are
# not failed until at least one agent is heard from again.
_ANY_HOST_HEARD = text(
    "SELECT EXISTS (SELECT 1 FROM hosts WHERE last_heartbeat >= now() - make_interval(secs => :timeout))"
)

# VMs on hosts that went offline: failed (agent lost connection), their capacity given back.
_FAIL_ON_OFFLINE = text(
    """
    WITH lost AS (
        UPDATE vms v
           SET status = CASE WHEN v.status = 'deleting' THEN 'deleted' ELSE 'failed' END,
               status_reason = CASE WHEN v.status = 'deleting' THEN 'deleted: host went offline'
                                    ELSE 'agent lost connection: host ' || v.hypervisor_id || ' went offline' END,
               failed_at = CASE WHEN v.status = 'deleting' THEN NULL ELSE now() END,
               attempts = v.attempts || jsonb_build_array(jsonb_build_object(
                   'attempt', v.attempt, 'host', v.hypervisor_id, 'outcome', 'agent lost connection',
                   'at', now())),
               updated_at = now()
          FROM hosts h
         WHERE h.id = v.hypervisor_id AND h.status = 'offline'
           AND v.status IN ('scheduled', 'running', 'deleting')
     RETURNING v.id, v.hypervisor_id, v.cpu, v.memory_mb, v.disk_gb, v.gpu, v.status
    ), released AS (
        UPDATE hosts h
           SET alloc_cpu = h.alloc_cpu - s.cpu, alloc_memory_mb = h.alloc_memory_mb - s.memory_mb,
               alloc_disk_gb = h.alloc_disk_gb - s.disk_gb, alloc_gpu = h.alloc_gpu - s.gpu,
               vm_count = h.vm_count - s.n
          FROM (SELECT hypervisor_id, sum(cpu) AS cpu, sum(memory_mb) AS memory_mb, sum(disk_gb) AS disk_gb,
                       sum(gpu) AS gpu, count(*) AS n
                  FROM lost GROUP BY hypervisor_id) s
         WHERE h.id = s.hypervisor_id
     RETURNING h.id
    )
    SELECT id, hypervisor_id, status, (SELECT count(*) FROM released) AS hosts FROM lost
    """
)

# Scheduled VMs no agent has answered for a while: their vm.assigned or command may have been
# dead-lettered after broker restarts. updated_at is bumped so each is re-sent once per period.
_TOUCH_STALE_SCHEDULED = text(
    f"""
    UPDATE vms SET updated_at = now()
     WHERE id IN (SELECT id FROM vms
                   WHERE status = 'scheduled' AND updated_at < now() - make_interval(secs => :stale)
                   ORDER BY updated_at LIMIT :limit FOR UPDATE SKIP LOCKED)
    RETURNING {VM_COLUMNS}
    """
)

# Failed VMs whose restart policy says on_failure, once the restart delay has passed.
_RESTART_FAILED = text(
    f"""
    UPDATE vms
       SET status = 'pending', attempt = attempt + 1, restart_count = restart_count + 1,
           exclude_hosts = CASE WHEN hypervisor_id IS NULL OR exclude_hosts ? hypervisor_id THEN exclude_hosts
                                ELSE exclude_hosts || to_jsonb(hypervisor_id) END,
           hypervisor_id = NULL, scheduled_at = NULL, failed_at = NULL, published_at = NULL,
           status_reason = 'restarting after failure (restart_policy on_failure)', updated_at = now()
     WHERE status = 'failed' AND restart_policy = 'on_failure' AND failed_at IS NOT NULL
       AND failed_at < now() - make_interval(secs => :delay)
    RETURNING {VM_COLUMNS}
    """
)


@dataclass(frozen=True, slots=True)
class OfflineCheck:
    offline: list[str]  # hosts that went offline in this check
    lost: list[tuple[UUID, str]]  # (vm, host) failed because their host is offline
    cut_off: bool  # no agent heard from at all: VMs were left alone


@dataclass(frozen=True, slots=True)
class HostAllocation:
    host_id: str
    allocated: Resources
    vm_count: int
    paused: bool
    heartbeat_at: float
    inserted: bool


@dataclass(frozen=True, slots=True)
class StatusChange:
    """What a status report did: the VM row after it, and whether capacity was freed."""

    vm: VmRow
    released_from: str | None
    republish: bool  # the VM went back to pending: publish vm.create


def heartbeat_params(beats: Sequence[AgentHeartbeat]) -> dict[str, list[Any]]:
    return {
        "ids": [b.agent_id for b in beats],
        "statuses": [b.status.value for b in beats],
        "labels": [json.dumps(b.labels, sort_keys=True) for b in beats],
        "cpus": [b.capacity.cpu for b in beats],
        "memories": [b.capacity.memory_mb for b in beats],
        "disks": [b.capacity.disk_gb for b in beats],
        "gpus": [b.capacity.gpu for b in beats],
        "cpu_ratios": [b.overcommit.cpu for b in beats],
        "memory_ratios": [b.overcommit.memory for b in beats],
    }


class GatewayStore:
    def __init__(self, engine: AsyncEngine, *, max_attempts: int) -> None:
        self.engine = engine
        self.max_attempts = max_attempts

    async def upsert_hosts(self, beats: Sequence[AgentHeartbeat]) -> list[HostAllocation]:
        """One statement for a batch of heartbeats (one per host: the caller keeps the newest).

        Rows are written, so locked, in host id order: the order every multi-host writer uses (the
        schedulers' batched commits, other heartbeat batches), so that they queue, not deadlock."""
        ordered = sorted(beats, key=lambda beat: beat.agent_id)
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_UPSERT_HOSTS, heartbeat_params(ordered))).all()
        return [
            HostAllocation(
                host_id=row.id,
                allocated=Resources(
                    cpu=row.alloc_cpu,
                    memory_mb=row.alloc_memory_mb,
                    disk_gb=row.alloc_disk_gb,
                    gpu=row.alloc_gpu,
                ),
                vm_count=row.vm_count,
                paused=row.scheduling_paused,
                heartbeat_at=float(row.heartbeat_at),
                inserted=row.inserted,
            )
            for row in rows
        ]

    async def mark_running_many(self, reports: Sequence[tuple[UUID, str]]) -> list[VmRow | None]:
        """Scheduled -> running on the reporting agent, for many reports in one transaction and two
        statements; for each report, None when it applied (or repeats one that did), else the VM's
        row as it is."""
        ids = [vm_id for vm_id, _ in reports]
        async with self.engine.begin() as connection:
            applied = {
                row.id
                for row in await connection.execute(
                    _MARK_RUNNING, {"ids": ids, "agents": [agent_id for _, agent_id in reports]}
                )
            }
            missed = [vm_id for vm_id in ids if vm_id not in applied]
            current = (
                {
                    row.id: VmRow.from_row(row)
                    for row in await connection.execute(_SELECT_VMS, {"ids": sorted(set(missed))})
                }
                if missed
                else {}
            )
        return [None if vm_id in applied else current.get(vm_id) for vm_id in ids]

    async def orphans(self, reported: Sequence[tuple[str, Sequence[UUID]]]) -> list[tuple[str, VmRow]]:
        """For each (host, VMs its agent reports running), the VMs it should not run: (host, row)."""
        pairs = [(host_id, vm_id) for host_id, vm_ids in reported for vm_id in vm_ids]
        if not pairs:
            return []
        params = {"hosts": [host for host, _ in pairs], "vm_ids": [vm for _, vm in pairs]}
        async with self.engine.connect() as connection:
            rows = (await connection.execute(_ORPHANS, params)).all()
        return [(row.reported_by, VmRow.from_row(row)) for row in rows]

    async def mark_failed(self, vm_id: UUID, agent_id: str, message: str) -> StatusChange | None:
        """The agent could not create (or lost) the VM: retry elsewhere, restart later, or fail it."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(_LOCK_VM, {"vm_id": vm_id})).first()
            if row is not None and row.hypervisor_id == agent_id and row.status == "deleting":
                # The VM still holds its host; it stays deleting, and the API's sweeper sends the
                # delete again after VMSCHED_RESEND_STALE_AFTER. The reason tells the user why it lingers.
                reason = f"delete failed on {agent_id}: {message}; it will be sent again"
                await connection.execute(
                    text("UPDATE vms SET status_reason = :reason, updated_at = now() WHERE id = :vm_id"),
                    {"vm_id": vm_id, "reason": reason},
                )
                return None
            if row is None or row.hypervisor_id != agent_id or row.status not in ("scheduled", "running"):
                return None
            vm = VmRow.from_row(row)
            await _release(connection, vm)
            attempts = [*row.attempts, _attempt_entry(vm, "failed", message)]
            was_running = row.status == "running"
            if not was_running and vm.attempt < self.max_attempts:
                values = {
                    "status": "pending",
                    "attempt": vm.attempt + 1,
                    "exclude_hosts": sorted({*vm.exclude_hosts, agent_id}),
                    "reason": f"attempt {vm.attempt} on {agent_id} failed: {message}; retrying on another host",
                    "failed_at": None,
                }
            else:
                if was_running:
                    reason = f"failed on {agent_id}: {message}"
                else:
                    reason = f"failed on every attempt ({vm.attempt}): " + "; ".join(
                        f"#{a['attempt']} {a['host']}: {a.get('message', a.get('outcome'))}" for a in attempts
                    )
                values = {
                    "status": "failed",
                    "attempt": vm.attempt,
                    "exclude_hosts": vm.exclude_hosts,
                    "reason": reason,
                    # Only a VM that ran is restarted by its restart policy; one no host could create
                    # has used its attempts.
                    "failed_at": datetime.now(UTC) if was_running else None,
                }
            await connection.execute(
                text(
                    """
                    UPDATE vms SET status = :status, attempt = :attempt, exclude_hosts = CAST(:exclude AS jsonb),
                                   status_reason = :reason, failed_at = :failed_at,
                                   attempts = CAST(:attempts AS jsonb),
                                   hypervisor_id = CASE WHEN :retry THEN NULL ELSE hypervisor_id END,
                                   scheduled_at = CASE WHEN :retry THEN NULL ELSE scheduled_at END,
                                   published_at = NULL, updated_at = now()
                     WHERE id = :vm_id
                    """
                ),
                {
                    "vm_id": vm_id,
                    "status": values["status"],
                    # Its own parameter: asyncpg types a parameter once, and :status is varchar above.
                    "retry": values["status"] == "pending",
                    "attempt": values["attempt"],
                    "exclude": json.dumps(values["exclude_hosts"]),
                    "reason": values["reason"],
                    "failed_at": values["failed_at"],
                    "attempts": json.dumps(attempts, default=str),
                },
            )
        after = VmRow(
            id=vm.id,
            name=vm.name,
            status=str(values["status"]),
            hypervisor_id=None if values["status"] == "pending" else agent_id,
            resources=vm.resources,
            labels=vm.labels,
            strategy=vm.strategy,
            exclude_hosts=list(values["exclude_hosts"]),  # type: ignore[call-overload]
            attempt=int(values["attempt"]),  # type: ignore[call-overload]
        )
        return StatusChange(vm=after, released_from=agent_id, republish=values["status"] == "pending")

    async def mark_deleted(self, vm_id: UUID, agent_id: str) -> StatusChange | None:
        async with self.engine.begin() as connection:
            row = (await connection.execute(_LOCK_VM, {"vm_id": vm_id})).first()
            if row is None or row.hypervisor_id != agent_id or row.status not in ("deleting", "scheduled", "running"):
                return None
            vm = VmRow.from_row(row)
            await _release(connection, vm)
            await connection.execute(
                text(
                    "UPDATE vms SET status = 'deleted', status_reason = NULL, updated_at = now(), "
                    "attempts = attempts || CAST(:entry AS jsonb) WHERE id = :vm_id"
                ),
                {"vm_id": vm_id, "entry": json.dumps([_attempt_entry(vm, "deleted", "")], default=str)},
            )
        return StatusChange(vm=vm, released_from=agent_id, republish=False)

    async def mark_offline_hosts(self, offline_after: float, *, fail_vms: bool = True) -> OfflineCheck:
        """Hosts silent for ``offline_after`` seconds become offline; with ``fail_vms``, the VMs of
        offline hosts fail, unless no agent at all has been heard from (see ``_ANY_HOST_HEARD``)."""
        params = {"timeout": offline_after}
        async with self.engine.begin() as connection:
            hosts = [row.id for row in (await connection.execute(_MARK_OFFLINE, params)).all()]
            if not await connection.scalar(_ANY_HOST_HEARD, params):
                return OfflineCheck(offline=hosts, lost=[], cut_off=True)
            if not fail_vms:
                return OfflineCheck(offline=hosts, lost=[], cut_off=False)
            lost = (await connection.execute(_FAIL_ON_OFFLINE)).all()
        return OfflineCheck(offline=hosts, lost=[(row.id, row.hypervisor_id) for row in lost], cut_off=False)

    async def touch_stale_scheduled(self, stale_after: float, limit: int = 500) -> list[VmRow]:
        """Scheduled VMs unanswered for ``stale_after`` seconds, marked so the next call skips them."""
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_TOUCH_STALE_SCHEDULED, {"stale": stale_after, "limit": limit})).all()
        return [VmRow.from_row(row) for row in rows]

    async def restart_failed(self, delay: float) -> list[VmRow]:
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_RESTART_FAILED, {"delay": delay})).all()
        return [VmRow.from_row(row) for row in rows]


async def _release(connection: AsyncConnection, vm: VmRow) -> None:
    r = vm.resources
    await connection.execute(
        _RELEASE_HOST,
        {
            "host_id": vm.hypervisor_id,
            "cpu": r.cpu,
            "memory_mb": r.memory_mb,
            "disk_gb": r.disk_gb,
            "gpu": r.gpu,
        },
    )


def _attempt_entry(vm: VmRow, outcome: str, message: str) -> dict[str, Any]:
    return {
        "attempt": vm.attempt,
        "host": vm.hypervisor_id,
        "outcome": outcome,
        "message": message,
        "at": datetime.now(UTC).isoformat(),
    }
