"""Lifecycle changes written many at a time (:func:`vmsched_pg.vm_writes.apply`), on the real
PostgreSQL: every change of a call in one statement, each still guarded by the status it expects,
and the hosts given back what the landed changes release, summed per host."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import host_row, insert_vm
from vmsched_contract.messages import Resources
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import Change, agent_deleted, agent_failed, delete_requested
from vmsched_pg import vm_writes
from vmsched_pg.rows import vm_from_row


async def _host(engine: AsyncEngine, host_id: str, *, vms: int, extra: dict[str, int]) -> None:
    """A host holding ``vms`` VMs of 1 CPU, 512 MiB and 1 GB each, and ``extra``."""
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, alloc_cpu, alloc_memory_mb, alloc_disk_gb,"
                " vm_count, extra, alloc_extra) VALUES (:id, 'online', 64, 262144, 1000, :vms, :vms * 512, :vms,"
                " :vms, CAST(:extra AS jsonb), CAST(:extra AS jsonb))"
            ),
            {"id": host_id, "vms": vms, "extra": json.dumps(extra)},
        )


async def _vm(
    engine: AsyncEngine, host: str, *, extra: dict[str, int] | None = None, status: str = "running"
) -> uuid.UUID:
    """A VM of 1 CPU, 512 MiB and 1 GB (and ``extra``) on ``host``."""
    return await insert_vm(
        engine, status=status, host=host, resources=Resources(cpu=1, memory_mb=512, disk_gb=1, extra=extra or {})
    )


async def _vms(engine: AsyncEngine, ids: Sequence[uuid.UUID]) -> list[VmRecord]:
    async with engine.connect() as connection:
        return [vm_from_row(row) for row in await connection.execute(vm_writes.LOCK_VMS, {"ids": list(ids)})]


async def _apply(engine: AsyncEngine, changes: Sequence[Change]) -> list[Change]:
    async with engine.begin() as connection:
        ids = sorted({change.after.id for change in changes})
        await connection.execute(vm_writes.LOCK_VMS, {"ids": ids})
        return await vm_writes.apply(connection, changes)


def _changed(change: Change | None) -> Change:
    assert change is not None
    return change


async def test_a_hundred_deletes_land_together_and_each_host_gets_its_own_vms_back(private_engine: AsyncEngine) -> None:
    await _host(private_engine, "hv-w1", vms=70, extra={"fpga": 2})
    await _host(private_engine, "hv-w2", vms=30, extra={})
    ids = [await _vm(private_engine, "hv-w1", extra={"fpga": 1} if n < 2 else None) for n in range(70)]
    ids += [await _vm(private_engine, "hv-w2") for _ in range(30)]

    asked = [_changed(delete_requested(vm)) for vm in await _vms(private_engine, ids)]
    assert await _apply(private_engine, asked) == asked
    deleting = await _vms(private_engine, ids)
    assert {(vm.status.value, vm.status_reason) for vm in deleting} == {("deleting", "deleting: its agent was told")}
    assert (await host_row(private_engine, "hv-w1")).vm_count == 70  # a VM being deleted still holds its room

    # hv-w1's agent reports 40 of its VMs gone, hv-w2's agent all of its own.
    gone = [vm for vm in deleting if vm.hypervisor_id == "hv-w2" or vm.id in set(ids[:40])]
    done = [_changed(agent_deleted(vm, vm.hypervisor_id or "", time.time())) for vm in gone]
    assert await _apply(private_engine, done) == done

    first, second = await host_row(private_engine, "hv-w1"), await host_row(private_engine, "hv-w2")
    assert (first.vm_count, first.allocated.cpu, first.allocated.memory_mb, first.allocated.disk_gb) == (
        30,
        30,
        30 * 512,
        30,
    )
    assert first.allocated.extra == {}  # both fpga VMs were among the first 40
    assert (second.vm_count, second.allocated.cpu, second.allocated.memory_mb) == (0, 0, 0)
    assert sum(vm.status.value == "deleted" for vm in await _vms(private_engine, ids)) == 70


async def test_a_change_computed_from_a_stale_read_does_not_land_nor_release(private_engine: AsyncEngine) -> None:
    await _host(private_engine, "hv-w3", vms=2, extra={})
    ids = [await _vm(private_engine, "hv-w3", status="deleting") for _ in range(2)]
    stale, fresh = await _vms(private_engine, ids)
    async with private_engine.begin() as connection:  # something else moved the first VM on since it was read
        await connection.execute(text("UPDATE vms SET status = 'failed' WHERE id = :id"), {"id": stale.id})
    changes = [_changed(agent_deleted(vm, "hv-w3", time.time())) for vm in (stale, fresh)]

    assert await _apply(private_engine, changes) == changes[1:]

    by_id = {vm.id: vm for vm in await _vms(private_engine, [stale.id, fresh.id])}
    assert (by_id[stale.id].status.value, by_id[fresh.id].status.value) == ("failed", "deleted")
    assert (await host_row(private_engine, "hv-w3")).vm_count == 1  # only the landed change gave room back


async def test_every_field_a_change_writes_reads_back_as_the_change_has_it(private_engine: AsyncEngine) -> None:
    await _host(private_engine, "hv-w4", vms=2, extra={})
    refused_id = await _vm(private_engine, "hv-w4", status="scheduled")  # its create failed: tried elsewhere
    crashed_id = await _vm(private_engine, "hv-w4")  # it ran, and failed
    vms = await _vms(private_engine, [refused_id, crashed_id])
    now = time.time()
    failed = [
        _changed(agent_failed(vm, "hv-w4", "the disk is gone", now, max_attempts=3, exclude_for=600)) for vm in vms
    ]

    assert await _apply(private_engine, failed) == failed

    by_id = {vm.id: vm for vm in await _vms(private_engine, [refused_id, crashed_id])}
    refused = by_id[refused_id]
    assert refused == next(change.after for change in failed if change.after.id == refused_id)
    assert (refused.status.value, refused.hypervisor_id, list(refused.exclusions)) == ("pending", None, ["hv-w4"])
    assert refused.attempts[-1]["message"] == "the disk is gone"
    crashed = by_id[crashed_id]
    assert crashed == next(change.after for change in failed if change.after.id == crashed_id)
    assert crashed.failed_at is not None  # a timestamp, to the microsecond


async def test_two_changes_of_one_vm_in_one_call_land_in_their_order(private_engine: AsyncEngine) -> None:
    await _host(private_engine, "hv-w5", vms=1, extra={})
    (vm,) = await _vms(private_engine, [await _vm(private_engine, "hv-w5")])
    asked = _changed(delete_requested(vm))
    done = _changed(agent_deleted(asked.after, "hv-w5", time.time()))

    assert await _apply(private_engine, [asked, done]) == [asked, done]

    (after,) = await _vms(private_engine, [vm.id])
    assert after.status.value == "deleted"
    assert (await host_row(private_engine, "hv-w5")).vm_count == 0
