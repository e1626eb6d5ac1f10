"""PostgreSQL's guard of the HA reserve (vmsched_scheduler.reserve_guard) on the real PostgreSQL:
whatever the schedulers' passes believed, settlements never place more than a zone's failover
headroom, even several of them at once."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import insert_vm
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Resources
from vmsched_contract.strategy import Strategy
from vmsched_scheduler.ledger import PostgresLedger
from vmsched_scheduler.ports import Committed, Placement

VM = Resources(cpu=2, memory_mb=512, disk_gb=1)
HOSTS = ["hv-z1", "hv-z2", "hv-z3"]  # 8 vCPUs each, zone z: 16 vCPUs may be placed, 8 kept


async def zone_of_three(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        for host_id in HOSTS:
            await connection.execute(
                text(
                    "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, labels, last_heartbeat) "
                    "VALUES (:id, 'online', 8, 65536, 1000, CAST('{\"zone\": \"z\"}' AS jsonb), now())"
                ),
                {"id": host_id},
            )


async def placements(engine: AsyncEngine, count: int, only: str | None = None) -> list[Placement]:
    found = []
    for n in range(count):
        host_id = only or HOSTS[n % len(HOSTS)]
        vm_id = await insert_vm(engine, status="pending", resources=VM)
        async with engine.begin() as connection:  # VMs that restart: each needs room kept for it
            await connection.execute(text("UPDATE vms SET restart_policy = 'on_failure' WHERE id = :id"), {"id": vm_id})
        record = PlacementRecord(
            strategy=Strategy.LEAST_LOADED,
            host=host_id,
            considered=3,
            eligible=3,
            decided_at=datetime(2026, 1, 1, tzinfo=UTC),
            decision_us=1.0,
        )
        found.append(Placement(vm_id, 1, host_id, VM, Strategy.LEAST_LOADED, record))
    return found


async def test_a_settlement_places_up_to_the_zones_headroom_and_refuses_the_rest(private_engine: AsyncEngine) -> None:
    await zone_of_three(private_engine)
    ledger = PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED, ha_reserve_hosts=1)
    settled = await ledger.settle(await placements(private_engine, 10), [])
    outcomes = [result.outcome for result in settled.placements]
    assert outcomes == [Committed.PLACED] * 8 + [Committed.RESERVE_REFUSED] * 2  # in the round's order
    # Without a reserve the same ledger places all it is given.
    free = PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED)
    assert {r.outcome for r in (await free.settle(await placements(private_engine, 2), [])).placements} == {
        Committed.PLACED
    }


async def test_settlements_at_once_never_place_more_than_the_headroom_together(private_engine: AsyncEngine) -> None:
    await zone_of_three(private_engine)
    ledgers = [
        PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED, ha_reserve_hosts=1) for _ in HOSTS
    ]
    # Three rounds on three hosts (no host lock in common), 4 VMs each: 12 would fit the hosts, the
    # reserve keeps room for one host's VMs, so 8 are placed.
    rounds = [await placements(private_engine, 4, only=host_id) for host_id in HOSTS]
    settled = await asyncio.gather(*(ledger.settle(batch, []) for ledger, batch in zip(ledgers, rounds, strict=True)))
    outcomes = Counter(result.outcome for s in settled for result in s.placements)
    assert outcomes == {Committed.PLACED: 8, Committed.RESERVE_REFUSED: 4}
    async with private_engine.connect() as connection:
        allocated = await connection.scalar(text("SELECT sum(alloc_cpu) FROM hosts"))
    assert allocated == 16
