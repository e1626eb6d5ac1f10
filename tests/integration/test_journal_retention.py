"""The decision journal's retention on the real servers: pruning removes what no decision inside the
retention reads (those still replay exactly), whole chains past it go, one replica at a time prunes,
and the API answers 410 for a decision whose entry was pruned."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.stack import Stack
from tests.integration.waiting import eventually
from tests.placement.support import NOW, TIMEOUT, context, host, request
from tests.servers import Servers
from vmsched_contract.strategy import Strategy
from vmsched_pg.engine import create_engine
from vmsched_pg.journal import PrunedEntry, append, chain, prune
from vmsched_placement import Decision, Demand, Fleet, Weights, decide
from vmsched_placement.journal import Entry, Journal, rebuild
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.journal_pruning import prune_forever

EVERY = 4  # entries between checkpoints: checkpoints are entries 1, 5, 9, 13, ...
DECISIONS = 30


def decisions(count: int = DECISIONS) -> list[tuple[Entry, Decision]]:
    """A replica's chain: ``count`` decisions on four hosts filling up, each entry with its decision."""
    fleet = Fleet.from_hosts([host(f"hv-0{n}", cpu=64) for n in range(4)])
    journal = Journal(Weights(), TIMEOUT, checkpoint_every=EVERY, at_least_fleet=False)
    made = []
    for number in range(count):
        fleet.allocate(f"hv-0{number % 4}", Demand(1, 256, 1))  # another replica's claim, read
        wanted = request(cpu=1 + number % 3, strategy=[Strategy.LEAST_LOADED, Strategy.BEST_FIT][number % 2])
        own = context(now=NOW + number)
        decision = decide(fleet, wanted, own)
        made.append((journal.note(fleet, wanted, own, None), decision))
        if decision.host_id is not None:
            fleet.allocate(decision.host_id, wanted.demand)
    return made


async def write(engine: AsyncEngine, replica: str, made: list[tuple[Entry, Decision]], *, old_up_to: int) -> None:
    """Append the chain; entries up to ``old_up_to`` written two days ago."""
    await append(engine, replica, [(entry.seq, entry.checkpoint, entry.body) for entry, _ in made])
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "UPDATE decision_journal SET created_at = now() - interval '2 days' "
                "WHERE replica = :replica AND seq <= :seq"
            ),
            {"replica": replica, "seq": old_up_to},
        )


async def stored(engine: AsyncEngine, replica: str) -> list[int]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT seq FROM decision_journal WHERE replica = :replica ORDER BY seq"), {"replica": replica}
        )
        return [row.seq for row in rows]


async def test_pruning_keeps_what_every_decision_inside_the_retention_reads(private_engine: AsyncEngine) -> None:
    made = decisions()
    await write(private_engine, "straddles", made, old_up_to=14)
    await write(private_engine, "expired", decisions(), old_up_to=DECISIONS)
    await write(private_engine, "fresh", decisions(), old_up_to=0)

    deleted = await prune(private_engine, datetime.now(UTC) - timedelta(days=1))

    # 15 is the first decision inside the retention; it reads from checkpoint 13, the last one written
    # before the cutoff: everything before 13 goes, 13 and 14 (expired) stay for it.
    assert await stored(private_engine, "straddles") == list(range(13, DECISIONS + 1))
    assert await stored(private_engine, "expired") == []
    assert await stored(private_engine, "fresh") == list(range(1, DECISIONS + 1))
    assert deleted == 12 + DECISIONS
    async with private_engine.connect() as connection:
        for entry, decision in made[14:]:
            inputs = rebuild(await chain(connection, "straddles", entry.seq), "vm", "vm")
            again = decide(inputs.fleet, inputs.request, inputs.context)
            assert (again.host_id, again.score, again.ranked) == (decision.host_id, decision.score, decision.ranked)
        for entry, _ in made[:12]:
            with pytest.raises(PrunedEntry):
                await chain(connection, "straddles", entry.seq)
    # Pruning again changes nothing.
    assert await prune(private_engine, datetime.now(UTC) - timedelta(days=1)) == 0


async def test_one_replica_at_a_time_prunes_and_only_with_the_lock(
    private_engine: AsyncEngine, servers: Servers
) -> None:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    snapshot = Snapshot(redis, f"{servers.redis_key_prefix}-prune-{uuid.uuid4().hex[:6]}")
    lock_key = f"{snapshot.prefix}:journal-prune-lock"
    await write(private_engine, "expired", decisions(), old_up_to=DECISIONS)
    # Another replica holds the lock for 1.5 s more: nothing is pruned before it lapses.
    await redis.set(lock_key, "another replica", px=1500)
    held_until = time.monotonic() + 1.5
    loops = [asyncio.create_task(prune_forever(private_engine, snapshot, 86400.0, 1.0)) for _ in range(2)]
    try:
        await eventually(
            lambda: stored(private_engine, "expired"), lambda seqs: seqs == [], timeout=30, what="the chain pruned"
        )
        assert time.monotonic() >= held_until - 0.1

        async def lock() -> tuple[bytes | str | None, int]:
            return await redis.get(lock_key), await redis.pttl(lock_key)

        # One of the two loops holds it, for its interval (it lapses then and is taken again).
        await eventually(
            lock,
            lambda held: held[0] not in (None, "another replica") and 0 < held[1] <= 1000,
            timeout=10,
            what="a pruning loop holding the lock",
        )
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await redis.delete(lock_key)
        await redis.aclose()


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


async def test_the_stacks_scheduler_prunes(stack: Stack) -> None:
    """The scheduler runs the pruning loop: one replica prunes as it starts, then every interval.
    (Its Redis lock is no evidence here: a test of the shared stack may flush the installation's
    keys, the lock's with them, and the loop takes it again only an interval later.)"""
    pruned = await eventually(
        lambda: asyncio.sleep(
            0, [line for line in stack.log_lines("scheduler-1") if line.get("message") == "decision journal pruned"]
        ),
        lambda lines: len(lines) > 0,
        timeout=30,
        what="the scheduler's first pruning",
    )
    assert isinstance(pruned[0]["entries"], int)


async def test_a_pruned_decision_answers_410_and_a_kept_one_replays(api: httpx.AsyncClient, servers: Servers) -> None:
    # A VM no host takes (its own label): its decision is journaled by the stack's scheduler.
    suite = f"retention-{uuid.uuid4().hex[:6]}"
    body = {"name": suite, "cpu": 1, "memory_mb": 256, "disk_gb": 1, "labels": {"suite": suite}}
    created = await api.post("/v1/vms", json=body)
    assert created.status_code == 202, created.text
    vm_id = created.json()["id"]
    await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] == "unschedulable",
        timeout=30,
        what="the VM decided",
    )
    replayed = await api.get(f"/v1/vms/{vm_id}/placement/replay")
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["same"] is True

    # A chain of this test's own replica, its first 14 entries written two days ago, pruned as the
    # scheduler prunes (the stack's own chains are fresh: the cutoff leaves them alone).
    replica = f"test-{uuid.uuid4().hex[:8]}"
    made = decisions()
    engine = create_engine(servers.database_url, pool_size=1)
    try:
        await write(engine, replica, made, old_up_to=14)
        await prune(engine, datetime.now(UTC) - timedelta(days=1))
    finally:
        await engine.dispose()

    async def point_at(seq: int, decision: Decision) -> None:
        """The VM's record names entry ``seq`` of the test's replica, and that entry's decision."""
        candidates = [{"host": decision.host_id, "score": decision.score}] if decision.host_id else []
        journal = {"replica": replica, "seq": seq, "kind": "placement"}
        conn = await asyncpg.connect(servers.asyncpg_dsn)
        try:
            await conn.execute(
                "UPDATE vms SET placement = placement || $2::jsonb WHERE id = $1",
                uuid.UUID(vm_id),
                json.dumps({"journal": journal, "candidates": candidates, "strategy": "least_loaded"}),
            )
        finally:
            await conn.close()

    entry, decision = made[2]
    await point_at(entry.seq, decision)
    gone = await api.get(f"/v1/vms/{vm_id}/placement/replay")
    assert gone.status_code == 410, gone.text
    assert "pruned" in gone.json()["detail"]
    assert "VMSCHED_JOURNAL_RETENTION" in gone.json()["detail"]

    entry, decision = made[20]
    await point_at(entry.seq, decision)
    kept = await api.get(f"/v1/vms/{vm_id}/placement/replay")
    assert kept.status_code == 200, kept.text
    assert kept.json()["host"] == decision.host_id
    assert kept.json()["same"] is True
