"""A preemption's settlement on the real PostgreSQL (vmsched_scheduler.ledger.settle_preemption, and
vmsched_scheduler.evictions.evict for one that moves its victims).

Disruption budgets: two schedulers at the same instant, each taking a different member of a group
whose budget lets one go (deleting it or moving it), queue on the group's row; the second then
counts the first's victim as unavailable and takes nothing. The two are lined up by hand: a third
transaction holds the group's row until both wait for it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
from faststream.rabbit import RabbitBroker
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.waiting import eventually
from vmsched_amqp.publishing import Publisher
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Resources
from vmsched_contract.strategy import Strategy
from vmsched_scheduler.evictions import PostgresEvictions
from vmsched_scheduler.ledger import PostgresLedger
from vmsched_scheduler.ports import Committed, Placement

VM = Resources(cpu=2, memory_mb=512, disk_gb=5)
HOSTS = ["hv-1", "hv-2"]  # 2 vCPUs each, each full with one member of the group


async def group_of_two_members(engine: AsyncEngine) -> tuple[uuid.UUID, dict[str, uuid.UUID]]:
    """A group with ``max_unavailable: 1`` and one running member (priority 0) filling each host."""
    group_id = uuid.uuid4()
    members = {host_id: uuid.uuid4() for host_id in HOSTS}
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO server_groups (id, name, policy, max_unavailable) "
                "VALUES (:id, 'pdb', 'soft-anti-affinity', 1)"
            ),
            {"id": group_id},
        )
        for host_id, vm_id in members.items():
            await connection.execute(
                text(
                    "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, last_heartbeat, "
                    "alloc_cpu, alloc_memory_mb, alloc_disk_gb, vm_count) "
                    "VALUES (:id, 'online', :cpu, :memory_mb, :disk_gb, now(), :cpu, :memory_mb, :disk_gb, 1)"
                ),
                {"id": host_id, **VM.model_dump(include={"cpu", "memory_mb", "disk_gb"})},
            )
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb, priority, "
                    "server_group, scheduled_at, started_at) "
                    "VALUES (:id, 'member', 'running', :host, :cpu, :memory_mb, :disk_gb, 0, :group, now(), now())"
                ),
                {
                    "id": vm_id,
                    "host": host_id,
                    "group": group_id,
                    **VM.model_dump(include={"cpu", "memory_mb", "disk_gb"}),
                },
            )
    return group_id, members


async def preemptor(engine: AsyncEngine, host_id: str) -> Placement:
    """A pending VM of priority 500, to be placed on ``host_id`` in its member's room."""
    vm_id = uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, cpu, memory_mb, disk_gb, priority) "
                "VALUES (:id, 'urgent', 'pending', :cpu, :memory_mb, :disk_gb, 500)"
            ),
            {"id": vm_id, **VM.model_dump(include={"cpu", "memory_mb", "disk_gb"})},
        )
    record = PlacementRecord(
        strategy=Strategy.LEAST_LOADED,
        host=host_id,
        considered=2,
        eligible=2,
        decided_at=datetime(2026, 1, 1, tzinfo=UTC),
        decision_us=1.0,
    )
    return Placement(vm_id, 1, host_id, VM, Strategy.LEAST_LOADED, record)


async def waiting_for_locks(dsn: str) -> int:
    """Backends of this database waiting for a lock (a fresh connection: pg_stat_activity is read
    once per transaction)."""
    connection = await asyncpg.connect(dsn)
    try:
        waiting: int = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return waiting
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def lined_up(engine: AsyncEngine, group_id: uuid.UUID, takers: int) -> AsyncIterator[None]:
    """Holds the group's row while the body starts ``takers``; lets them through once all of them
    have locked their own VMs and wait for the group's."""
    dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    holder = await asyncpg.connect(dsn)
    try:
        async with holder.transaction():
            await holder.execute("SELECT id FROM server_groups WHERE id = $1 FOR UPDATE", group_id)
            yield
            await eventually(
                lambda: waiting_for_locks(dsn),
                lambda n: n == takers,
                timeout=30,
                what="every taker waiting for the group's lock",
            )
    finally:
        await holder.close()


async def member_statuses(engine: AsyncEngine, group_id: uuid.UUID) -> list[str]:
    async with engine.connect() as connection:
        found = await connection.execute(text("SELECT status FROM vms WHERE server_group = :g"), {"g": group_id})
        return sorted(found.scalars())


async def test_two_settlements_at_once_take_no_more_members_than_the_budget(private_engine: AsyncEngine) -> None:
    group_id, members = await group_of_two_members(private_engine)
    placements = [await preemptor(private_engine, host_id) for host_id in HOSTS]
    ledger = PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED)
    async with lined_up(private_engine, group_id, takers=2):
        settling = [
            asyncio.ensure_future(ledger.settle_preemption(placement, [members[placement.host_id]], 500))
            for placement in placements
        ]
    outcomes = sorted(result.outcome.value for result, _ in await asyncio.gather(*settling))
    assert outcomes == sorted([Committed.PLACED.value, Committed.BUDGET_SPENT.value])
    assert await member_statuses(private_engine, group_id) == ["preempted", "running"]  # one taken: the budget


async def test_a_move_and_a_settlement_at_once_take_no_more_members_than_the_budget(
    private_engine: AsyncEngine,
) -> None:
    group_id, members = await group_of_two_members(private_engine)
    moving_for, deleting_for = [await preemptor(private_engine, host_id) for host_id in HOSTS]
    ledger = PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED)
    evictions = PostgresEvictions(private_engine, Publisher(RabbitBroker()))  # evict publishes nothing
    async with lined_up(private_engine, group_id, takers=2):
        moving = asyncio.ensure_future(
            evictions.evict(moving_for.vm_id, 1, moving_for.host_id, [members[moving_for.host_id]], 500)
        )
        settling = asyncio.ensure_future(ledger.settle_preemption(deleting_for, [members[deleting_for.host_id]], 500))
    moved, (settled, _) = await moving, await settling
    # Whichever went first took the budget's one member; the other took none.
    assert (moved is None) != (settled.outcome is Committed.BUDGET_SPENT), (moved, settled)
    assert await member_statuses(private_engine, group_id) in (["migrating", "running"], ["preempted", "running"])


async def test_a_settlement_that_cannot_take_every_victim_places_nothing(private_engine: AsyncEngine) -> None:
    # The same victim named twice: its second change finds it preempted already and does not land.
    # The settlement is rolled back; it must not answer PLACED (the caller would announce a VM that
    # PostgreSQL still holds pending, on a host whose room its victims kept).
    _, members = await group_of_two_members(private_engine)
    async with private_engine.begin() as connection:  # no budget in the way
        await connection.execute(text("UPDATE vms SET server_group = NULL WHERE id = :id"), {"id": members["hv-1"]})
    placement = await preemptor(private_engine, "hv-1")
    ledger = PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED)
    result, preempted = await ledger.settle_preemption(placement, [members["hv-1"], members["hv-1"]], 500)
    assert (result.outcome, preempted) == (Committed.VICTIM_MOVED, [])
    async with private_engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT status FROM vms WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY priority"),
            {"ids": [members["hv-1"], placement.vm_id]},
        )
        assert list(rows.scalars()) == ["running", "pending"]
