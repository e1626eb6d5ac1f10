"""PostgreSQL's guard of a disruption budget at a preemption's settlement
(vmsched_scheduler.ledger.settle_preemption), on the real PostgreSQL: two schedulers settling at the
same instant, each taking a different member of one group whose budget lets one go, queue on the
group's row; the second then counts the first's victim as unavailable and takes nothing. The two
are lined up by hand: a third transaction holds the group's row until both wait for it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.waiting import eventually
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Resources
from vmsched_contract.strategy import Strategy
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


async def test_two_settlements_at_once_take_no_more_members_than_the_budget(private_engine: AsyncEngine) -> None:
    group_id, members = await group_of_two_members(private_engine)
    placements = [await preemptor(private_engine, host_id) for host_id in HOSTS]
    ledger = PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED)
    dsn = private_engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    holder = await asyncpg.connect(dsn)
    try:
        async with holder.transaction():
            # The group's row held: each settlement locks its own VMs, then waits here for the group's.
            await holder.execute("SELECT id FROM server_groups WHERE id = $1 FOR UPDATE", group_id)
            settling = [
                asyncio.create_task(ledger.settle_preemption(placement, [members[placement.host_id]], 500))
                for placement in placements
            ]
            await eventually(
                lambda: waiting_for_locks(dsn),
                lambda n: n == 2,
                timeout=30,
                what="both settlements at the group's lock",
            )
        settled = await asyncio.gather(*settling)
    finally:
        await holder.close()
    outcomes = sorted(result.outcome.value for result, _ in settled)
    assert outcomes == sorted([Committed.PLACED.value, Committed.BUDGET_SPENT.value])
    async with private_engine.connect() as connection:
        statuses = sorted(
            (
                await connection.execute(text("SELECT status FROM vms WHERE server_group = :g"), {"g": group_id})
            ).scalars()
        )
    assert statuses == ["preempted", "running"]  # one member taken: the budget
