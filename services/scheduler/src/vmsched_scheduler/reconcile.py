"""Rebuild and check the Redis snapshot from PostgreSQL, the truth (the seed's "restore VM-to-agent
mappings on startup", done on start and then periodically by one replica at a time).

For every host: the claims of its committed VMs, of the VMs migrating to it (their target claims)
and of the reservation slots it holds (:data:`vmsched_pg.shares.HOLDINGS`) are restored,
claims PostgreSQL does not count are dropped once older than the grace period, and the allocations
are set to PostgreSQL's plus the claims still in flight. PostgreSQL's own ``alloc_*`` columns are
checked against the same sums too; a difference would be a bug, so it is logged loudly and repaired
under the host's row lock.
Then every server group: its members per domain are set to PostgreSQL's, plus its claims in flight;
then the shared storage pools (:mod:`~vmsched_scheduler.pool_reconcile`).

PostgreSQL's view is read first and written to Redis host by host afterwards, while schedulers,
the gateway and the sweeps go on releasing claims. A claim released after the view was read is
remembered by Redis (``Snapshot.released_key``) and neither restored nor counted: without that, a
deleted VM's or an expired reservation's room came back as allocated until the next reconcile, and
the scheduler turned VMs away from a host with room (Redis over-counting; never an overcommit).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, astuple, dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import add_counts
from vmsched_pg.rows import trusted
from vmsched_pg.shares import HOLDINGS, SHARES
from vmsched_redis.claims import CommittedVm
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.one_replica import every_interval_on_one_replica
from vmsched_scheduler.pool_reconcile import reconcile_pools

log = get_logger(__name__)

# A claim younger than this may belong to a scheduler between its claim and its commit.
CLAIM_GRACE_SECONDS = 30.0
# Releases are remembered this long: a reconcile taking longer stops where it is (the next one,
# on a fresh view, does the rest), since a release older than this may have been forgotten.
RELEASES_KEPT_SECONDS = 600.0

_HOSTS = text(
    "SELECT id, alloc_cpu, alloc_memory_mb, alloc_disk_gb, alloc_gpu, alloc_extra, vm_count FROM hosts"
    ' ORDER BY id COLLATE "C"'
)
# The VMs' shares of hosts (a migrating VM's on both) and the reservations' held slots, each claimed
# in Redis by its own id: what a host's allocations add up to.
_COMMITTED = text(
    f"""
    SELECT claim_id, host_id, cpu, memory_mb, disk_gb, gpu, extra FROM ({HOLDINGS}) holdings
     ORDER BY host_id COLLATE "C"
    """
)
# Every group with each committed member and its domain (vmsched_domain.groups.domain_of, in SQL); a
# group without members comes once, with NULLs: its counts are emptied.
_GROUP_MEMBERS = text(
    f"""
    SELECT g.id AS group_id, s.claim_id,
           CASE WHEN g.topology_key = 'host' THEN h.id ELSE h.labels ->> g.topology_key END AS domain
      FROM server_groups g
      LEFT JOIN ({SHARES}) s ON s.server_group = g.id
      LEFT JOIN hosts h ON h.id = s.host_id
     ORDER BY g.id
    """
)
# The host's row is locked by a statement of its own before the sums are read: in one statement, the
# sums would be read from the snapshot taken before waiting for the lock, missing the change of the
# transaction that held it, and written over it.
_LOCK_HOST = text("SELECT id FROM hosts WHERE id = :host_id FOR UPDATE")
_REPAIR_HOST = text(
    f"""
    WITH holding AS (SELECT * FROM ({HOLDINGS}) holdings WHERE host_id = :host_id),
         sums AS (
            SELECT coalesce(sum(cpu), 0) AS cpu, coalesce(sum(memory_mb), 0) AS memory_mb,
                   coalesce(sum(disk_gb), 0) AS disk_gb, coalesce(sum(gpu), 0) AS gpu, count(*) AS n
              FROM holding),
         extra_sums AS (
            SELECT coalesce(jsonb_object_agg(by_name.key, by_name.total), CAST('{{}}' AS jsonb)) AS extra
              FROM (SELECT e.key, sum(CAST(e.value AS bigint)) AS total
                      FROM holding CROSS JOIN LATERAL jsonb_each_text(holding.extra) AS e
                     GROUP BY e.key HAVING sum(CAST(e.value AS bigint)) <> 0) by_name)
    UPDATE hosts SET alloc_cpu = sums.cpu, alloc_memory_mb = sums.memory_mb, alloc_disk_gb = sums.disk_gb,
                     alloc_gpu = sums.gpu, alloc_extra = extra_sums.extra, vm_count = sums.n
      FROM sums, extra_sums WHERE hosts.id = :host_id
    """
)


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    hosts: int
    restored_claims: int
    dropped_claims: int
    in_flight_claims: int
    repaired_hosts: int
    stale_claims: int = 0

    def plus(self, other: ReconcileReport) -> ReconcileReport:
        return ReconcileReport(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


async def reconcile(engine: AsyncEngine, snapshot: Snapshot, *, grace: float = CLAIM_GRACE_SECONDS) -> ReconcileReport:
    # One consistent view: the hosts' recorded allocations and the VMs they should add up to. The
    # VMs are streamed in host order, one host's at a time in memory: a fleet holds hundreds of
    # thousands of VMs, and this runs every VMSCHED_RECONCILE_INTERVAL.
    report = ReconcileReport(0, 0, 0, 0, 0)
    view_at = await snapshot.server_time()  # before PostgreSQL's view: a release after it is remembered
    deadline = time.monotonic() + RELEASES_KEPT_SECONDS / 2
    async with engine.connect() as plain:
        connection = await plain.execution_options(isolation_level="REPEATABLE READ")
        hosts = (await connection.execute(_HOSTS)).all()
        vms = await connection.stream(_COMMITTED, execution_options={"yield_per": 2000})
        by_host = _group_by_host(vms)
        pending: tuple[str, list[CommittedVm]] | None = await anext(by_host, None)
        now = time.time()
        for host in hosts:  # both in byte order of the id (COLLATE "C", as Python compares): walk together
            if time.monotonic() > deadline:
                log.warning("reconcile stopped: its PostgreSQL view is too old", hosts_done=report.hosts)
                return report
            while pending is not None and pending[0] < host.id:  # VMs of a host without a row
                pending = await anext(by_host, None)
            mine = pending[1] if pending is not None and pending[0] == host.id else []
            report = report.plus(await _reconcile_host(engine, snapshot, host, mine, now, grace, view_at))
        groups = (await connection.execute(_GROUP_MEMBERS)).all()
        await connection.rollback()
    if report.restored_claims or report.dropped_claims or report.repaired_hosts:
        log.info("snapshot reconciled with PostgreSQL", **asdict(report))
    await _reconcile_groups(snapshot, groups, now, grace, view_at)
    if restored_pools := await reconcile_pools(engine, snapshot):
        log.info("shared storage pools' allocations restored from PostgreSQL", pools=restored_pools)
    await snapshot.forget_releases(before=view_at - RELEASES_KEPT_SECONDS)
    return report


async def _reconcile_groups(snapshot: Snapshot, rows: Sequence[Any], now: float, grace: float, view_at: float) -> None:
    """After the hosts (whose claims it names): each group's counts from its members' rows."""
    members: dict[uuid.UUID, list[tuple[uuid.UUID | str, str]]] = {}
    for row in rows:
        found = members.setdefault(row.group_id, [])
        if row.claim_id is not None and row.domain is not None:  # a host without the label: in no domain
            found.append((row.claim_id, row.domain))
    dropped = 0
    for group_id, committed in members.items():
        dropped += (await snapshot.reconcile_group(group_id, committed, now, grace, view_at))[2]
    if dropped:
        log.info("server group claims dropped by reconciliation", groups=len(members), dropped=dropped)


async def _group_by_host(rows: AsyncIterator[Any]) -> AsyncIterator[tuple[str, list[CommittedVm]]]:
    """(host id, the shares PostgreSQL counts on it) from rows ordered by host id."""
    current: str | None = None
    group: list[CommittedVm] = []
    async for row in rows:
        if row.host_id != current:
            if current is not None:
                yield current, group
            current, group = row.host_id, []
        group.append(CommittedVm(row.claim_id, trusted(row.cpu, row.memory_mb, row.disk_gb, row.gpu, row.extra)))
    if current is not None:
        yield current, group


async def _reconcile_host(
    engine: AsyncEngine,
    snapshot: Snapshot,
    host: Any,
    vms: list[CommittedVm],
    now: float,
    grace: float,
    view_at: float,
) -> ReconcileReport:
    amounts = [0, 0, 0, 0]
    extra: dict[str, int] = {}
    for vm in vms:  # ints, not Resources.plus: a host may hold thousands of VMs, and this runs often
        r = vm.resources
        for i, amount in enumerate((r.cpu, r.memory_mb, r.disk_gb, r.gpu)):
            amounts[i] += amount
        if r.extra:
            extra = add_counts(extra, r.extra)
    cpu, memory_mb, disk_gb, gpu = amounts
    total = trusted(cpu, memory_mb, disk_gb, gpu, extra)
    recorded = trusted(host.alloc_cpu, host.alloc_memory_mb, host.alloc_disk_gb, host.alloc_gpu, host.alloc_extra)
    repaired = 0
    if (recorded, host.vm_count) != (total, len(vms)):
        log.error(
            "host allocations disagree with its VMs; repairing",
            host=host.id,
            recorded=[*recorded.model_dump().values(), host.vm_count],
            computed=[*total.model_dump().values(), len(vms)],
        )
        async with engine.begin() as connection:
            await connection.execute(_LOCK_HOST, {"host_id": host.id})
            await connection.execute(_REPAIR_HOST, {"host_id": host.id})
        repaired = 1
    restored, dropped, in_flight, stale = await snapshot.reconcile_host(
        host.id, total, len(vms), vms, now, grace, view_at
    )
    return ReconcileReport(1, restored, dropped, in_flight, repaired, stale)


async def reconcile_forever(engine: AsyncEngine, snapshot: Snapshot, interval: float) -> None:
    """Reconcile every ``interval`` seconds; a Redis lock lets one replica at a time do it."""
    await every_interval_on_one_replica(
        snapshot, "reconcile-lock", interval, lambda: reconcile(engine, snapshot), "reconcile failed"
    )
