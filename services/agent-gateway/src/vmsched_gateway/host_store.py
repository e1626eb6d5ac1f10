"""The gateway's writes about hosts: heartbeats folded into the ``hosts`` table, hosts that fall
silent or are lost, hosts that come back, and the VMs each of these moves through the lifecycle.

Rows are locked in host id order by every writer that locks several hosts (these statements, the
schedulers' settlements), so that they queue instead of deadlocking.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import AgentHeartbeat, HostStatus, Overcommit, Resources, Taint
from vmsched_contract.status import VmStatus
from vmsched_domain.extra import extra_json
from vmsched_domain.fencing import LostHost
from vmsched_domain.fit import RESOURCES
from vmsched_domain.inventory import labels_json, taints_json, taints_of
from vmsched_domain.lifecycle import HOLDS_CAPACITY, HOLDS_TARGET, Event, sources, sql_in
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import CLOCK_SKEW, Change, host_fenced, host_lost, host_returned
from vmsched_gateway.instances import Holder, Refused, settle
from vmsched_pg import vm_writes
from vmsched_pg.inventory import overlay
from vmsched_pg.rows import VM_COLUMNS, VM_FIELDS, columns, trusted, vm_from_row
from vmsched_redis.host_hash import capabilities_json, networks_json
from vmsched_redis.storage_pools import pools_json

_FIELDS = [rule.field for rule in RESOURCES]

# The agent's values go to agent_* (and, for a new host, straight to the effective columns); a known
# host's effective columns are the agent's new values overlaid by what the operator set.
# Who holds each host id (vmsched_gateway.instances), the rows locked in id order (as the upsert
# that follows locks them) so that the holder cannot change between this read and the write.
_HOLDERS = text(
    """
    SELECT id, agent_instance, extract(epoch FROM now() - last_heartbeat) AS silent_for
      FROM hosts WHERE id = ANY(CAST(:ids AS text[]))
     ORDER BY id FOR UPDATE
    """
)
# What the VMs on a host take of its local pools, {pool: GB}: asked only of a host that lists a local
# pool (the others pay nothing), for a snapshot hash that has no allocations yet.
_LOCAL_POOLS_ALLOCATED = f"""
    CASE WHEN hosts.storage_pools @> '[{{"kind": "local"}}]' THEN
        (SELECT coalesce(jsonb_object_agg(x.pool, x.gb), '{{}}'::jsonb)
           FROM (SELECT w.pool, sum(w.size_gb) AS gb FROM vms v JOIN vm_volumes w ON w.vm_id = v.id
                  WHERE v.hypervisor_id = hosts.id AND NOT w.shared AND v.status IN {sql_in(HOLDS_CAPACITY)}
                  GROUP BY w.pool) x)
    ELSE '{{}}'::jsonb END"""

_UPSERT_HOSTS = text(
    f"""
    INSERT INTO hosts (id, status, labels, agent_labels, taints, agent_taints, cpu, memory_mb, disk_gb, gpu, extra,
                       cpu_ratio, memory_ratio, disk_ratio, agent_cpu_ratio, agent_memory_ratio, agent_disk_ratio,
                       agent_instance, capabilities, migration_uri, networks, storage_pools, last_heartbeat)
    SELECT t.id, t.status, CAST(t.labels AS jsonb), CAST(t.labels AS jsonb), CAST(t.taints AS jsonb),
           CAST(t.taints AS jsonb), t.cpu, t.memory_mb, t.disk_gb, t.gpu, CAST(t.extra AS jsonb), t.cpu_ratio,
           t.memory_ratio, t.disk_ratio, t.cpu_ratio, t.memory_ratio, t.disk_ratio, t.instance,
           CAST(t.capabilities AS jsonb), t.migration_uri, CAST(t.networks AS jsonb), CAST(t.storage_pools AS jsonb),
           now()
      FROM unnest(CAST(:ids AS text[]), CAST(:statuses AS text[]), CAST(:labels AS text[]), CAST(:taints AS text[]),
                  CAST(:cpus AS int[]), CAST(:memories AS bigint[]), CAST(:disks AS bigint[]),
                  CAST(:gpus AS int[]), CAST(:extras AS text[]), CAST(:cpu_ratios AS float8[]),
                  CAST(:memory_ratios AS float8[]), CAST(:disk_ratios AS float8[]), CAST(:instances AS text[]),
                  CAST(:capabilities AS text[]), CAST(:migration_uris AS text[]), CAST(:networks AS text[]),
                  CAST(:storage_pools AS text[]))
           AS t(id, status, labels, taints, cpu, memory_mb, disk_gb, gpu, extra, cpu_ratio, memory_ratio, disk_ratio,
                instance, capabilities, migration_uri, networks, storage_pools)
    ON CONFLICT (id) DO UPDATE
       SET status = CASE WHEN hosts.fenced_at IS NULL THEN excluded.status ELSE '{HostStatus.FENCED.value}' END,
           -- heard from again: a new silence may need the fence command again
           fence_tried_at = CASE WHEN hosts.fenced_at IS NULL THEN NULL ELSE hosts.fence_tried_at END,
           agent_labels = excluded.agent_labels, agent_taints = excluded.agent_taints,
           cpu = excluded.cpu, memory_mb = excluded.memory_mb, disk_gb = excluded.disk_gb, gpu = excluded.gpu,
           extra = excluded.extra, agent_cpu_ratio = excluded.agent_cpu_ratio,
           agent_memory_ratio = excluded.agent_memory_ratio, agent_disk_ratio = excluded.agent_disk_ratio,
           {overlay(agent="excluded", operator="hosts")},
           agent_instance = excluded.agent_instance, capabilities = excluded.capabilities,
           migration_uri = excluded.migration_uri, networks = excluded.networks,
           storage_pools = excluded.storage_pools, last_heartbeat = excluded.last_heartbeat
    RETURNING id, alloc_cpu, alloc_memory_mb, alloc_disk_gb, alloc_gpu, alloc_extra, vm_count, scheduling_paused,
              reserved_cpu, reserved_memory_mb, reserved_disk_gb, reserved_gpu, labels, taints, cpu_ratio,
              memory_ratio, disk_ratio, dedicated_to, (xmax = 0) AS inserted, fenced_at IS NOT NULL AS fenced,
              {_LOCAL_POOLS_ALLOCATED} AS alloc_pools
    """
)

# The silent hosts' VMs of a returning host: those its heartbeat settles.
_UNKNOWN_ON = text(
    f"""
    SELECT {VM_COLUMNS} FROM vms
     WHERE hypervisor_id = ANY(CAST(:hosts AS text[])) AND status IN {sql_in(sources(Event.HOST_RETURNED))}
     ORDER BY id FOR UPDATE
    """
)

_MARK_OFFLINE = text(
    f"""
    UPDATE hosts SET status = '{HostStatus.OFFLINE.value}'
     WHERE status NOT IN ('{HostStatus.OFFLINE.value}', '{HostStatus.FENCED.value}')
       AND (last_heartbeat IS NULL OR last_heartbeat < now() - make_interval(secs => :timeout))
    RETURNING id
    """
)
_OFFLINE_HOSTS = text(f"SELECT id FROM hosts WHERE status = '{HostStatus.OFFLINE.value}' ORDER BY id")
# The VMs of offline hosts become unknown: presumed running, their capacity kept, nothing failed.
# Found from the hosts (usually none are offline), never by walking every VM in these states.
_VMS_UNKNOWN = text(
    f"""
    UPDATE vms SET status = '{VmStatus.UNKNOWN.value}', updated_at = now(),
                   status_reason = 'host ' || hypervisor_id || ' silent: presumed running'
     WHERE hypervisor_id = ANY(CAST(:hosts AS text[]))
       AND status IN {sql_in(sources(Event.HOST_SILENT))}
    RETURNING id
    """
)
# Whether any agent at all was heard from within the timeout (see health.FailureGrace).
_ANY_HOST_HEARD = text(
    "SELECT EXISTS (SELECT 1 FROM hosts WHERE last_heartbeat >= now() - make_interval(secs => :timeout))"
)
_ON_LOST_HOSTS = text(
    f"""
    SELECT {columns(VM_FIELDS, "v")} FROM vms v JOIN hosts h ON h.id = v.hypervisor_id
     WHERE h.status = '{HostStatus.OFFLINE.value}'
       AND (h.last_heartbeat IS NULL OR h.last_heartbeat < now() - make_interval(secs => :lost))
       AND h.fenced_at IS NULL AND h.id = ANY(CAST(:hosts AS text[]))
       AND v.status IN {sql_in(sources(Event.HOST_LOST))}
     ORDER BY v.id LIMIT :limit FOR UPDATE OF v SKIP LOCKED
    """
)
# Unfenced hosts silent past the lost timeout that still hold VMs the loss would change.
_LOST_HOSTS = text(
    f"""
    SELECT h.id, h.labels, h.fence_tried_at IS NOT NULL AS tried,
           h.fence_tried_at IS NOT NULL AND h.fence_retry_at <= now() AS retry_due
      FROM hosts h
     WHERE h.status = '{HostStatus.OFFLINE.value}' AND h.fenced_at IS NULL
       AND (h.last_heartbeat IS NULL OR h.last_heartbeat < now() - make_interval(secs => :lost))
       AND EXISTS (SELECT 1 FROM vms v WHERE v.hypervisor_id = h.id AND v.status IN {sql_in(sources(Event.HOST_LOST))})
     ORDER BY h.id
    """
)
# The VMs of fenced hosts that still hold them: found from the hosts (usually none is fenced).
_ON_FENCED_HOSTS = text(
    f"""
    SELECT {columns(VM_FIELDS, "v")} FROM vms v JOIN hosts h ON h.id = v.hypervisor_id
     WHERE h.fenced_at IS NOT NULL AND v.status IN {sql_in(sources(Event.HOST_FENCED))}
     ORDER BY v.id LIMIT :limit FOR UPDATE OF v SKIP LOCKED
    """
)
# VMs an agent says it runs that PostgreSQL does not hold on that host (a VM migrating to it is held
# there too). VMs PostgreSQL has never heard of are left alone: the hypervisor may run VMs vmsched
# does not manage.
# A heartbeat taken before the VM's last change (give or take the clocks' skew) says nothing of it:
# one that waited in a backlog while the VM's delete was reported on the status queue still lists it.
# The host's next heartbeat does, if the VM is still there.
_ORPHANS = text(
    f"""
    SELECT r.host_id AS reported_by, {columns(VM_FIELDS, "v")}
      FROM unnest(CAST(:hosts AS text[]), CAST(:vm_ids AS uuid[]), CAST(:taken AS timestamptz[]))
           AS r(host_id, vm_id, taken_at)
      JOIN vms v ON v.id = r.vm_id
     WHERE (v.hypervisor_id IS DISTINCT FROM r.host_id OR v.status NOT IN {sql_in(HOLDS_CAPACITY)})
       AND (v.migration_target IS DISTINCT FROM r.host_id OR v.status NOT IN {sql_in(HOLDS_TARGET)})
       AND v.updated_at < r.taken_at - make_interval(secs => {CLOCK_SKEW})
    """
)


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What PostgreSQL makes of a heartbeat: the effective inventory (the agent's overlaid by the
    operator's), the operator's own fields and the allocations (for a snapshot hash that has none yet)."""

    host_id: str
    allocated: Resources
    vm_count: int
    paused: bool
    reserved: Resources
    inserted: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    fenced: bool = False  # its agent is back, but it stays down until the operator unfences it
    taints: tuple[Taint, ...] = ()
    overcommit: Overcommit = field(default_factory=Overcommit)
    dedicated_to: str | None = None
    pools_allocated: Mapping[str, int] = field(default_factory=dict)  # what its VMs take of its local pools


@dataclass(frozen=True, slots=True)
class Folded:
    hosts: list[HostFacts]
    returned: list[Change]  # VMs of returning hosts, settled by their heartbeats
    accepted: Mapping[str, AgentHeartbeat] = field(default_factory=dict)  # the beat folded, per host
    refused: list[Refused] = field(default_factory=list)  # from an agent process that does not hold the host


@dataclass(frozen=True, slots=True)
class SilenceCheck:
    offline: list[str]  # hosts that went offline in this check
    unknown: int  # VMs that became unknown
    heard_any: bool  # some agent was heard from within the timeout


def heartbeat_params(beats: Sequence[AgentHeartbeat], holders: Mapping[str, Holder]) -> dict[str, list[object]]:
    return {
        "ids": [b.agent_id for b in beats],
        "statuses": [b.status.value for b in beats],
        "labels": [labels_json(b.labels) for b in beats],
        "taints": [taints_json(b.taints) for b in beats],
        "cpus": [b.capacity.cpu for b in beats],
        "memories": [b.capacity.memory_mb for b in beats],
        "disks": [b.capacity.disk_gb for b in beats],
        "gpus": [b.capacity.gpu for b in beats],
        "extras": [extra_json(b.capacity.extra) for b in beats],
        "cpu_ratios": [b.overcommit.cpu for b in beats],
        "memory_ratios": [b.overcommit.memory for b in beats],
        "disk_ratios": [b.overcommit.disk for b in beats],
        "instances": [holders[b.agent_id].instance_id for b in beats],
        "capabilities": [capabilities_json(b.capabilities) for b in beats],
        "migration_uris": [b.migration_uri for b in beats],
        "networks": [networks_json(b.networks) for b in beats],
        "storage_pools": [pools_json(b.storage_pools) for b in beats],
    }


class HostStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def fold_heartbeats(self, beats: Sequence[AgentHeartbeat], *, takeover_after: float) -> Folded:
        """One transaction for a batch of heartbeats: those of the agent process that holds each
        host id (:func:`vmsched_gateway.instances.settle`; another one's are refused), the newest
        per host written to the hosts' rows, then the unknown VMs of these hosts settled by what each
        heartbeat lists."""
        now = time.time()
        async with self.engine.begin() as connection:
            holders = {
                row.id: Holder(row.agent_instance, math.inf if row.silent_for is None else float(row.silent_for))
                for row in await connection.execute(_HOLDERS, {"ids": sorted({beat.agent_id for beat in beats})})
            }
            settled = settle(holders, beats, takeover_after)
            ordered = sorted(settled.accepted.values(), key=lambda beat: beat.agent_id)
            listed = {(beat.agent_id, vm_id) for beat in ordered for vm_id in beat.vm_ids}
            if not ordered:
                return Folded([], [], refused=settled.refused)
            rows = (await connection.execute(_UPSERT_HOSTS, heartbeat_params(ordered, settled.holders))).all()
            unknown = [
                vm_from_row(row)
                for row in await connection.execute(_UNKNOWN_ON, {"hosts": [beat.agent_id for beat in ordered]})
            ]
            heard_at = {beat.agent_id: beat.sent_at.timestamp() for beat in ordered}
            changes = [
                change
                for vm in unknown
                if (
                    change := host_returned(
                        vm, (vm.hypervisor_id, vm.id) in listed, now, heard_at.get(vm.hypervisor_id or "")
                    )
                )
                is not None
            ]
            returned = await vm_writes.apply(connection, changes) if changes else []
        hosts = [
            HostFacts(
                host_id=row.id,
                allocated=trusted(
                    row.alloc_cpu, row.alloc_memory_mb, row.alloc_disk_gb, row.alloc_gpu, row.alloc_extra
                ),
                vm_count=row.vm_count,
                paused=row.scheduling_paused,
                reserved=Resources(
                    cpu=row.reserved_cpu,
                    memory_mb=row.reserved_memory_mb,
                    disk_gb=row.reserved_disk_gb,
                    gpu=row.reserved_gpu,
                ),
                inserted=row.inserted,
                fenced=row.fenced,
                labels=dict(row.labels),
                taints=taints_of(row.taints) or (),
                overcommit=Overcommit.model_construct(cpu=row.cpu_ratio, memory=row.memory_ratio, disk=row.disk_ratio),
                dedicated_to=row.dedicated_to,
                pools_allocated=dict(row.alloc_pools or {}),
            )
            for row in rows
        ]
        return Folded(hosts, returned, settled.accepted, settled.refused)

    async def silence(self, offline_after: float) -> SilenceCheck:
        """Hosts silent for ``offline_after`` seconds become offline, and the VMs of offline hosts
        unknown."""
        params = {"timeout": offline_after}
        async with self.engine.begin() as connection:
            offline = [row.id for row in await connection.execute(_MARK_OFFLINE, params)]
            silent = [row.id for row in await connection.execute(_OFFLINE_HOSTS)]
            unknown = len((await connection.execute(_VMS_UNKNOWN, {"hosts": silent})).all()) if silent else 0
            heard_any = bool(await connection.scalar(_ANY_HOST_HEARD, params))
        return SilenceCheck(offline, unknown, heard_any)

    async def lost_hosts(self, lost_after: float) -> list[LostHost]:
        """Unfenced hosts silent for ``lost_after`` seconds whose VMs the loss would change."""
        async with self.engine.connect() as connection:
            rows = (await connection.execute(_LOST_HOSTS, {"lost": lost_after})).all()
        return [
            LostHost(row.id, dict(row.labels or {}), fenced=False, tried=row.tried, retry_due=bool(row.retry_due))
            for row in rows
        ]

    async def lose(
        self, lost_after: float, *, hosts: Sequence[str], exclude_for: float, limit: int = 500
    ) -> list[Change]:
        """The VMs of ``hosts`` (unfenced, silent for ``lost_after`` seconds): unknown ones fail
        (their restart policy then applies), deleting ones are deleted; their capacity is given back."""
        if not hosts:
            return []
        now = time.time()
        params = {"lost": lost_after, "limit": limit, "hosts": list(hosts)}
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_ON_LOST_HOSTS, params)).all()
            changes = [
                change
                for row in rows
                if (change := host_lost(vm_from_row(row), now, exclude_for=exclude_for)) is not None
            ]
            return await vm_writes.apply(connection, changes) if changes else []

    async def fail_fenced(self, *, exclude_for: float, limit: int = 500) -> list[Change]:
        """The VMs fenced hosts still hold: failed (their restart policy applies), deleting ones
        deleted; their capacity is given back."""
        now = time.time()
        async with self.engine.begin() as connection:
            rows = (await connection.execute(_ON_FENCED_HOSTS, {"limit": limit})).all()
            changes = [
                change
                for row in rows
                if (change := host_fenced(vm_from_row(row), now, exclude_for=exclude_for)) is not None
            ]
            return await vm_writes.apply(connection, changes) if changes else []

    async def orphans(self, reported: Sequence[tuple[str, datetime, Sequence[UUID]]]) -> list[tuple[str, VmRecord]]:
        """For each (host, when its agent took the heartbeat, VMs it runs), those PostgreSQL does not
        hold there and did not change since: (host, row)."""
        triples = [(host_id, taken_at, vm_id) for host_id, taken_at, vm_ids in reported for vm_id in vm_ids]
        if not triples:
            return []
        params = {
            "hosts": [host for host, _, _ in triples],
            "taken": [taken_at for _, taken_at, _ in triples],
            "vm_ids": [vm for _, _, vm in triples],
        }
        async with self.engine.connect() as connection:
            rows = (await connection.execute(_ORPHANS, params)).all()
        return [(row.reported_by, vm_from_row(row)) for row in rows]
