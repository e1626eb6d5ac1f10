"""Rebuild and check the Redis snapshot from PostgreSQL, the truth (the seed's "restore VM-to-agent
mappings on startup", done on start and then periodically by one replica at a time).

For every host: the claims of its committed VMs are restored, claims of VMs PostgreSQL does not
count are dropped once older than the grace period, and the allocations are set to PostgreSQL's plus
the claims still in flight. PostgreSQL's own ``alloc_*`` columns are checked against the sum of the
VMs too; a difference would be a bug, so it is logged loudly and repaired under the host's row lock.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_common.logs import get_logger
from vmsched_common.messages import Resources
from vmsched_common.snapshot import CommittedVm, Snapshot

log = get_logger(__name__)

# A claim younger than this may belong to a scheduler between its claim and its commit.
CLAIM_GRACE_SECONDS = 30.0

_HOSTS = text("SELECT id, alloc_cpu, alloc_memory_mb, alloc_disk_gb, alloc_gpu, vm_count FROM hosts")
_COMMITTED = text(
    """
    SELECT id, hypervisor_id, cpu, memory_mb, disk_gb, gpu FROM vms
     WHERE status IN ('scheduled', 'running', 'deleting') AND hypervisor_id IS NOT NULL
    """
)
_REPAIR_HOST = text(
    """
    WITH locked AS (SELECT id FROM hosts WHERE id = :host_id FOR UPDATE),
         sums AS (
            SELECT coalesce(sum(cpu), 0) AS cpu, coalesce(sum(memory_mb), 0) AS memory_mb,
                   coalesce(sum(disk_gb), 0) AS disk_gb, coalesce(sum(gpu), 0) AS gpu, count(*) AS n
              FROM vms WHERE hypervisor_id = :host_id AND status IN ('scheduled', 'running', 'deleting'))
    UPDATE hosts SET alloc_cpu = sums.cpu, alloc_memory_mb = sums.memory_mb, alloc_disk_gb = sums.disk_gb,
                     alloc_gpu = sums.gpu, vm_count = sums.n
      FROM sums, locked WHERE hosts.id = locked.id
    """
)


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    hosts: int
    restored_claims: int
    dropped_claims: int
    in_flight_claims: int
    repaired_hosts: int


async def reconcile(engine: AsyncEngine, snapshot: Snapshot, *, grace: float = CLAIM_GRACE_SECONDS) -> ReconcileReport:
    # One consistent view: the hosts' recorded allocations and the VMs they should add up to.
    async with engine.connect() as plain:
        connection = await plain.execution_options(isolation_level="REPEATABLE READ")
        hosts = (await connection.execute(_HOSTS)).all()
        committed_rows = (await connection.execute(_COMMITTED)).all()
        await connection.rollback()

    committed: dict[str, list[CommittedVm]] = defaultdict(list)
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for row in committed_rows:
        resources = Resources(cpu=row.cpu, memory_mb=row.memory_mb, disk_gb=row.disk_gb, gpu=row.gpu)
        committed[row.hypervisor_id].append(CommittedVm(row.id, resources))
        total = sums[row.hypervisor_id]
        for i, amount in enumerate((row.cpu, row.memory_mb, row.disk_gb, row.gpu, 1)):
            total[i] += amount

    repaired = 0
    restored = dropped = in_flight = 0
    now = time.time()
    for host in hosts:
        recorded = [host.alloc_cpu, host.alloc_memory_mb, host.alloc_disk_gb, host.alloc_gpu, host.vm_count]
        if recorded != sums[host.id]:
            log.error(
                "host allocations disagree with its VMs; repairing",
                host=host.id,
                recorded=recorded,
                computed=sums[host.id],
            )
            async with engine.begin() as connection:
                await connection.execute(_REPAIR_HOST, {"host_id": host.id})
            repaired += 1
        total = sums[host.id]
        counts = await snapshot.reconcile_host(
            host.id,
            Resources(cpu=total[0], memory_mb=total[1], disk_gb=total[2], gpu=total[3]),
            total[4],
            committed.get(host.id, []),
            now,
            grace,
        )
        restored += counts[0]
        dropped += counts[1]
        in_flight += counts[2]
    report = ReconcileReport(len(hosts), restored, dropped, in_flight, repaired)
    if restored or dropped or repaired:
        log.info("snapshot reconciled with PostgreSQL", **asdict(report))
    return report


async def reconcile_forever(engine: AsyncEngine, snapshot: Snapshot, interval: float) -> None:
    """Reconcile every ``interval`` seconds; a Redis lock lets one replica at a time do it."""
    owner = uuid.uuid4().hex
    lock_key = f"{snapshot.prefix}:reconcile-lock"
    while True:
        try:
            if await snapshot.redis.set(lock_key, owner, nx=True, px=int(interval * 1000)):
                await reconcile(engine, snapshot)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the loop outlives any one failure; the next round retries
            log.warning("reconcile failed", error=repr(error))
        await asyncio.sleep(interval)
