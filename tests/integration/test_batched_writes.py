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
from vmsched_amqp.failures import is_transient
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import AgentHeartbeat, ReportedStatus, Resources
from vmsched_contract.strategy import Strategy
from vmsched_gateway.host_store import HostStore
from vmsched_gateway.report_store import AgentReport, ReportStore
from vmsched_pg.engine import create_engine
from vmsched_pg.outbox import published_marks
from vmsched_runtime.batching import ItemFailed, each_alone_on_failure
from vmsched_scheduler.ledger import PostgresLedger
from vmsched_scheduler.ports import Committed, Placement


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


async def test_deleted_and_failed_reports_apply_together_each_seeing_the_ones_before_it(
    private_engine: AsyncEngine,
) -> None:
    store = ReportStore(private_engine, max_attempts=3, exclude_for=600)
    deleted = await _vm(private_engine, "deleting", "hv-a")
    elsewhere = await _vm(private_engine, "deleting", "hv-b")  # the report comes from hv-a: not its host
    failed = await _vm(private_engine, "scheduled", "hv-a")
    unknown = uuid.uuid4()

    results = await store.report_many(
        [
            AgentReport(deleted, "hv-a", ReportedStatus.DELETED),
            AgentReport(elsewhere, "hv-a", ReportedStatus.DELETED),
            AgentReport(failed, "hv-a", ReportedStatus.FAILED, "disk image missing"),
            AgentReport(unknown, "hv-a", ReportedStatus.DELETED),
            AgentReport(deleted, "hv-a", ReportedStatus.DELETED),  # again: it finds the first applied
        ]
    )

    changed = [None if r.change is None else r.change.after.status.value for r in results]
    assert changed[:2] == ["deleted", None]
    assert changed[2] in ("pending", "failed")  # tried again elsewhere, or not, as the lifecycle says
    assert changed[3:] == [None, None]
    assert results[3].vm is None  # nothing to say about a VM PostgreSQL does not know
    assert results[4].vm is not None
    assert results[4].vm.status == "deleted"  # the second report saw the first
    assert [await _status(private_engine, vm) for vm in (deleted, elsewhere, failed)] == [
        "deleted",
        "deleting",
        changed[2],
    ]


async def test_a_report_postgresql_refuses_fails_alone_and_the_rest_of_its_batch_applies(
    private_engine: AsyncEngine,
) -> None:
    store = ReportStore(private_engine, max_attempts=3, exclude_for=600)
    deleted, refused, failed = (
        await _vm(private_engine, "deleting", "hv-p"),
        await _vm(private_engine, "scheduled", "hv-p"),
        await _vm(private_engine, "scheduled", "hv-p"),
    )
    reports = [
        AgentReport(deleted, "hv-p", ReportedStatus.DELETED),
        AgentReport(refused, "hv-p", ReportedStatus.FAILED, "no\x00disk"),  # jsonb takes no NUL: refused
        AgentReport(failed, "hv-p", ReportedStatus.FAILED, "disk image missing"),
    ]
    with pytest.raises(DBAPIError):  # together, the one refused report fails them all
        await store.report_many(reports)

    results = await each_alone_on_failure(store.report_many, reports, everyones=is_transient)

    assert isinstance(results[1], ItemFailed)
    assert isinstance(results[1].error, DBAPIError)
    assert [await _status(private_engine, vm) for vm in (deleted, refused, failed)] == [
        "deleted",
        "scheduled",
        "pending",
    ]


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
    await store.fold_heartbeats(beats, takeover_after=15.0)  # the rows exist: the next writes update (and lock) them
    rng = random.Random(3)
    for _ in range(10):
        orders = [rng.sample(beats, len(beats)) for _ in range(6)]
        results = await asyncio.wait_for(
            asyncio.gather(*(store.fold_heartbeats(o, takeover_after=15.0) for o in orders)), timeout=30
        )
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


async def _waiting_for_a_lock(engine: AsyncEngine, others: int, timeout: float = 20.0) -> None:
    """Until ``others`` other sessions of this database wait for a row lock, or fail at ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    )
    while True:
        async with engine.connect() as connection:
            if await connection.scalar(query) >= others:
                return
        assert asyncio.get_running_loop().time() < deadline, "no writer ever waited for the held row"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("writer", ["round", "published marks"])
async def test_writers_of_pending_vms_lock_them_in_id_order(private_engine: AsyncEngine, writer: str) -> None:
    """The scheduler's round and the API's published marks both change pending VMs, many at once;
    each takes their rows in id order, like everyone else, so none can hold one row while waiting
    for another that a second writer holds while waiting for the first (measured before the fix:
    a one-second stall, then an aborted transaction, a few times a minute under load).

    A transaction that follows the order holds the lowest VM; the writer, given the VMs highest
    first, must wait for it before it takes any other, so the transaction can then take the highest."""
    async with private_engine.begin() as connection:
        await connection.execute(
            text("INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb) VALUES ('hv-o', 'online', 64, 65536, 1000)")
        )
    vms = sorted([await _vm(private_engine, "pending", None) for _ in range(20)])
    record = PlacementRecord(
        strategy=Strategy.BEST_FIT,
        host="hv-o",
        considered=1,
        eligible=1,
        decided_at="2026-01-01T00:00:00Z",
        decision_us=1.0,
    )
    ledger = PostgresLedger(private_engine, default_strategy=Strategy.BEST_FIT)
    marks = published_marks(private_engine)

    async def write() -> None:
        highest_first = vms[::-1]
        if writer == "round":
            placements = [
                Placement(vm, 1, "hv-o", Resources(cpu=1, memory_mb=512, disk_gb=1), Strategy.BEST_FIT, record)
                for vm in highest_first
            ]
            settled = await ledger.settle(placements, [])
            assert {p.outcome for p in settled.placements} == {Committed.PLACED}
        else:
            await marks.submit([str(vm) for vm in highest_first])

    # The holder and the watcher on connections of their own: the writer has the engine's pool.
    side = create_engine(private_engine.url.render_as_string(hide_password=False), pool_size=2)
    try:
        async with side.begin() as holder:
            await holder.execute(text("SELECT 1 FROM vms WHERE id = :id FOR UPDATE"), {"id": vms[0]})
            writing = asyncio.create_task(write())
            await _waiting_for_a_lock(side, 1)
            # Would deadlock (and PostgreSQL abort one side after deadlock_timeout) had the writer
            # taken the highest VM before waiting for the lowest.
            await asyncio.wait_for(
                holder.execute(text("SELECT 1 FROM vms WHERE id = :id FOR UPDATE"), {"id": vms[-1]}), timeout=20
            )
        await asyncio.wait_for(writing, timeout=20)
        await marks.drain()
    finally:
        await side.dispose()
