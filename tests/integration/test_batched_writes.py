"""The writes that are batched for throughput, on the real PostgreSQL: many agents' ``running``
reports in one transaction, heartbeat batches (the gateway), the API's records of confirmed
publishes; and the deadlocks multi-row writers must neither cause nor die of."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import insert_vm
from vmsched_common.amqp import is_transient
from vmsched_common.messages import AgentHeartbeat, Resources
from vmsched_common.outbox import published_marks
from vmsched_gateway.host_store import HostStore
from vmsched_gateway.report_store import ReportStore

pytestmark = pytest.mark.integration


async def _vm(engine: AsyncEngine, status: str, host: str | None) -> uuid.UUID:
    return await insert_vm(engine, status=status, host=host)


async def _status(engine: AsyncEngine, vm_id: uuid.UUID) -> str:
    async with engine.connect() as connection:
        status: str = await connection.scalar(text("SELECT status FROM vms WHERE id = :id"), {"id": vm_id})
    return status


async def test_running_reports_apply_together_and_each_says_whether_it_applied(private_engine: AsyncEngine) -> None:
    store = ReportStore(private_engine, max_attempts=3, exclude_for=600)
    first = await _vm(private_engine, "scheduled", "hv-a")
    second = await _vm(private_engine, "scheduled", "hv-b")
    moved = await _vm(private_engine, "scheduled", "hv-b")  # the report comes from hv-a: not its host
    deleting = await _vm(private_engine, "deleting", "hv-a")
    unknown = uuid.uuid4()

    results = await store.mark_running(
        [(first, "hv-a"), (second, "hv-b"), (moved, "hv-a"), (deleting, "hv-a"), (unknown, "hv-a"), (first, "hv-a")]
    )

    assert [r.applied for r in results] == [True, True, False, False, False, True]  # the last repeats the first
    moved_row, deleting_row = results[2].vm, results[3].vm
    assert moved_row is not None
    assert (moved_row.hypervisor_id, moved_row.status) == ("hv-b", "scheduled")
    assert deleting_row is not None
    assert deleting_row.status == "deleting"
    assert results[4].vm is None  # nothing to say about a VM PostgreSQL does not know
    assert [await _status(private_engine, vm) for vm in (first, second, moved, deleting)] == [
        "running",
        "running",
        "scheduled",
        "deleting",
    ]
    # A report that arrives again later finds the VM running: it does not apply, and says so.
    (again,) = await store.mark_running([(first, "hv-a")])
    assert not again.applied
    assert again.vm is not None
    assert again.vm.status == "running"


async def test_concurrent_batches_of_running_reports_do_not_deadlock(private_engine: AsyncEngine) -> None:
    store = ReportStore(private_engine, max_attempts=3, exclude_for=600)
    vms = [await _vm(private_engine, "scheduled", "hv-c") for _ in range(40)]
    # The same VMs in opposite orders, at once: rows are locked in id order, so neither waits forever.
    forward = [(vm, "hv-c") for vm in vms]
    results = await asyncio.wait_for(
        asyncio.gather(store.mark_running(forward), store.mark_running(forward[::-1])), timeout=20
    )
    applied = sum(1 for batch in results for r in batch if r.applied)
    assert applied == len(vms)  # each VM once; the other batch finds it running already
    assert {await _status(private_engine, vm) for vm in vms} == {"running"}


async def test_published_marks_of_concurrent_callers_all_land(private_engine: AsyncEngine) -> None:
    marks = published_marks(private_engine)
    vms = [await _vm(private_engine, "pending", None) for _ in range(30)]
    await asyncio.gather(*(marks.submit([str(vm)]) for vm in vms))
    await marks.drain()
    async with private_engine.connect() as connection:
        unmarked = await connection.scalar(
            text("SELECT count(*) FROM vms WHERE id = ANY(CAST(:ids AS uuid[])) AND published_at IS NULL"),
            {"ids": [str(vm) for vm in vms]},
        )
    assert unmarked == 0


async def test_heartbeat_batches_in_any_order_do_not_deadlock(private_engine: AsyncEngine) -> None:
    store = HostStore(private_engine)
    beats = [
        AgentHeartbeat(agent_id=f"hv-h{n:03}", capacity=Resources(cpu=8, memory_mb=8192, disk_gb=100))
        for n in range(300)
    ]
    await store.fold_heartbeats(beats)  # the rows exist: the next writes update (and lock) them
    rng = random.Random(3)
    for _ in range(10):
        orders = [rng.sample(beats, len(beats)) for _ in range(6)]
        results = await asyncio.wait_for(asyncio.gather(*(store.fold_heartbeats(o) for o in orders)), timeout=30)
        assert [len(folded.hosts) for folded in results] == [300] * 6


async def test_a_deadlock_victim_is_retried_as_transient(private_engine: AsyncEngine) -> None:
    """Two transactions lock two rows in opposite orders: PostgreSQL aborts one, and the consumers'
    retry treats that error as "run it again", not as a failed message."""
    first, second = await _vm(private_engine, "pending", None), await _vm(private_engine, "pending", None)
    both_locked_one = asyncio.Barrier(2)

    async def lock(a: uuid.UUID, b: uuid.UUID) -> None:
        async with private_engine.begin() as connection:
            await connection.execute(text("SELECT 1 FROM vms WHERE id = :id FOR UPDATE"), {"id": a})
            await both_locked_one.wait()
            await connection.execute(text("SELECT 1 FROM vms WHERE id = :id FOR UPDATE"), {"id": b})

    outcomes = await asyncio.wait_for(
        asyncio.gather(lock(first, second), lock(second, first), return_exceptions=True), timeout=20
    )
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert len(errors) == 1
    assert isinstance(errors[0], DBAPIError)
    assert is_transient(errors[0])
    assert not is_transient(ValueError("not a database error"))
