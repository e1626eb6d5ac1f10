"""The scheduler's side of PostgreSQL for migrations: a target claimed in Redis is committed here,
under the same guard as a placement.

The VMs are locked first (id order), then their hard server groups, then the target hosts (id
order), as every writer locks them. A target is committed only while its VM is still choosing the
target of that migration, and only onto a host that is online, unpaused, able to migrate
(``capabilities``), taking the VM's project (a dedicated host), within the fit rule (named extra
resources included) with the targets of this call before it, and allowed by the VM's server group
(whose members count where a migrating VM may be: on its source and its target).
Then the VM's share (its named extras too) is added to the target's allocations, in the same
transaction: from here the VM holds both hosts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Capability, HostStatus, Resources
from vmsched_domain.dedication import takes
from vmsched_domain.extra import extra_json
from vmsched_domain.fit import RESOURCES, fits
from vmsched_domain.live_migration import no_target, target_claimed
from vmsched_domain.records import HostRecord, VmRecord
from vmsched_domain.vm_changes import Change
from vmsched_pg import vm_writes
from vmsched_pg.extra_sql import sql_extra_plus
from vmsched_pg.rows import HOST_COLUMNS, host_from_row, vm_from_row
from vmsched_scheduler.group_guard import LOCK_GROUPS, hard_groups, refused_by_groups
from vmsched_scheduler.ports import Committed, MigrationSettlement, NoTarget, TargetClaim

_FIELDS = [rule.field for rule in RESOURCES]
_LOCK_HOSTS = text(f"SELECT {HOST_COLUMNS} FROM hosts WHERE id = ANY(CAST(:hosts AS text[])) ORDER BY id FOR UPDATE")
_GROW = text(
    f"""
    UPDATE hosts SET {", ".join(f"alloc_{f} = alloc_{f} + :{f}" for f in _FIELDS)}, vm_count = vm_count + 1,
           alloc_extra = CASE WHEN CAST(:extra AS jsonb) = CAST('{{}}' AS jsonb) THEN alloc_extra
                              ELSE {sql_extra_plus("alloc_extra", "CAST(:extra AS jsonb)")} END
     WHERE id = :host_id
    """
)
_RECORD = text("UPDATE vms SET placement = CAST(:record AS jsonb) WHERE id = :id")


async def settle_migrations(
    engine: AsyncEngine, targets: Sequence[TargetClaim], no_targets: Sequence[NoTarget]
) -> MigrationSettlement:
    async with engine.begin() as connection:
        ids = sorted({t.vm_id for t in targets} | {n.vm_id for n in no_targets})
        vms = {row.id: vm_from_row(row) for row in await connection.execute(vm_writes.LOCK_VMS, {"ids": ids})}
        placed: dict[UUID, Committed] = {}
        choosing = [t for t in targets if (vm := vms.get(t.vm_id)) and target_claimed(vm, t.migration, t.host_id)]
        if choosing:
            placed = await _commit_targets(connection, choosing, vms)
        ended: set[UUID] = set()
        for item in no_targets:
            vm = vms.get(item.vm_id)
            change = None if vm is None else no_target(vm, item.migration, item.reason, item.detail)
            if change is not None and await _write(connection, change, item.record):
                ended.add(item.vm_id)
    return MigrationSettlement(
        [placed.get(t.vm_id, Committed.NOT_PENDING) for t in targets],
        [Committed.NO_TARGET if n.vm_id in ended else Committed.NOT_PENDING for n in no_targets],
    )


async def _commit_targets(
    connection: AsyncConnection, targets: list[TargetClaim], vms: dict[UUID, VmRecord]
) -> dict[UUID, Committed]:
    groups = hard_groups(targets)
    if groups:
        await connection.execute(LOCK_GROUPS, {"ids": groups})
    rows = await connection.execute(_LOCK_HOSTS, {"hosts": sorted({t.host_id for t in targets})})
    hosts = {row.id: host_from_row(row) for row in rows}
    refused = await refused_by_groups(connection, targets, {h.id: h.labels for h in hosts.values()})
    booked: dict[str, Resources] = defaultdict(lambda: Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=0))
    results: dict[UUID, Committed] = {}
    for target in targets:
        host = hosts.get(target.host_id)
        vm = vms[target.vm_id]
        if host is None or not _takes(host, vm, target.resources, booked[target.host_id]):
            results[target.vm_id] = Committed.HOST_REFUSED
            continue
        if target.vm_id in refused:
            results[target.vm_id] = Committed.GROUP_REFUSED
            continue
        change = target_claimed(vm, target.migration, target.host_id)
        if change is None or not await _write(connection, change, target.record):
            results[target.vm_id] = Committed.NOT_PENDING
            continue
        await connection.execute(
            _GROW,
            {
                "host_id": target.host_id,
                **{f: getattr(target.resources, f) for f in _FIELDS},
                "extra": extra_json(target.resources.extra),
            },
        )
        booked[target.host_id] = booked[target.host_id].plus(target.resources)
        results[target.vm_id] = Committed.PLACED
    return results


def _takes(host: HostRecord, vm: VmRecord, resources: Resources, booked: Resources) -> bool:
    """The guard: the host is online, unpaused, can migrate, takes the VM's project (a dedicated host:
    vmsched_domain.dedication), and fits the VM on top of what it holds and what this call put on it
    before (the fit rule, named extra resources included: vmsched_domain.fit)."""
    holding = host.allocated.plus(booked)
    return (
        host.status == HostStatus.ONLINE.value
        and not host.scheduling_paused
        and host.can(Capability.MIGRATE)
        and takes(host.dedicated_to, vm.project, vm.dedicated)
        and fits(resources, host.capacity, host.reserved, host.overcommit, holding)
    )


async def _write(connection: AsyncConnection, change: Change, record: PlacementRecord) -> bool:
    if not await vm_writes.apply(connection, [change]):
        return False
    await connection.execute(_RECORD, {"id": change.after.id, "record": record.model_dump_json()})
    return True
