"""Four scheduler processes race to fill one shared storage pool: a pool with room for exactly N
volumes, 3N VMs asking one volume each submitted at once over 20 hosts that all reach it: exactly N
are placed (a shared pool's space is counted once, whichever host and replica), the others end
unschedulable with reason ``storage``; PostgreSQL (the truth) and the Redis snapshot count the same.
The replicas' rounds may not overlap (each reads the pool at its start): the same race is also run
without schedulers, 3N claims and, apart, 3N commits all at once, so that it is sure to be one.

Runs ``VMSCHED_POOL_RACES`` times (default 2).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from devtools.stack import Stack
from tests.faults.conftest import submit, wait_settled
from tests.faults.races.test_group_race import ALLOCATING, delete
from tests.fleets import enrolled_fleet
from tests.integration.stores import Stores, module_stores
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Overcommit, Resources
from vmsched_contract.storage import PoolKind, StoragePool
from vmsched_contract.strategy import Strategy
from vmsched_domain.storage import PoolTake, VolumePlacement
from vmsched_redis.claims import Claim, Claimed
from vmsched_redis.host_hash import HostWrite
from vmsched_redis.snapshot import Snapshot
from vmsched_redis.storage_pools import pools_json, put_shared_pool
from vmsched_scheduler.ports import Committed, Placement

pytestmark = pytest.mark.slow

SUITE = "poolrace"
POOL = f"{SUITE}-ceph"
HOSTS = 20
ROOM = 50  # N: the volumes the pool has room for
VOLUME_GB = 10
REPETITIONS = int(os.environ.get("VMSCHED_POOL_RACES", "2"))
SMALL = Resources(cpu=1, memory_mb=512, disk_gb=1)


@pytest.fixture(scope="module")
async def pool_race_fleet(four_schedulers: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = [
        host.model_copy(update={"storage_pools": [StoragePool(name=POOL, kind=PoolKind.SHARED)]})
        for host in generate_hosts(
            HOSTS, prefix=SUITE, capacity=Resources(cpu=64, memory_mb=65536, disk_gb=1000), labels={"suite": SUITE}
        )
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=2.0) as fleet:
        async with four_schedulers.async_client(timeout=30) as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"].startswith(SUITE) and h["status"] == "online") == HOSTS,
                timeout=120,
                what=f"the {HOSTS} hosts online",
            )
        yield fleet


@pytest.mark.parametrize("repetition", range(REPETITIONS))
async def test_four_schedulers_place_exactly_as_many_volumes_as_a_shared_pool_has_room_for(
    four_schedulers: Stack, pool_race_fleet: SimulatedFleet, servers: Servers, repetition: int
) -> None:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    snapshot = Snapshot(redis, servers.redis_key_prefix)
    run = uuid.uuid4().hex[:6]
    try:
        async with four_schedulers.async_client(timeout=120) as api:
            put = await api.put(f"/v1/storage-pools/{POOL}", json={"capacity_gb": ROOM * VOLUME_GB})
            assert put.status_code == 200, put.text
            bodies = [
                {"name": f"{SUITE}-{run}-{i}", "cpu": 1, "memory_mb": 256, "disk_gb": 1, "wait_s": 0,
                 "labels": {"suite": SUITE}, "volumes": [{"size_gb": VOLUME_GB}]}
                for i in range(3 * ROOM)
            ]  # fmt: skip
            # Thirty requests at once, so that every replica takes some.
            vm_ids = await submit(api, bodies, batch=3 * ROOM // 30)
            await wait_settled(servers, vm_ids, timeout=180)
            conn = await asyncpg.connect(servers.asyncpg_dsn)
            try:
                rows = await conn.fetch(
                    """SELECT id, status, status_reason,
                              jsonb_array_length(coalesce(placement -> 'refused_claims', '[]')) AS refused
                         FROM vms WHERE id = ANY($1::uuid[])""",
                    [uuid.UUID(v) for v in vm_ids],
                )
                on_pool = await conn.fetchval(
                    """SELECT coalesce(sum(w.size_gb), 0) FROM vm_volumes w JOIN vms v ON v.id = w.vm_id
                        WHERE w.pool = $1 AND w.shared AND v.status = ANY($2::text[])""",
                    POOL,
                    ALLOCATING,
                )
            finally:
                await conn.close()
            placed = [row for row in rows if row["status"] in ALLOCATING]
            others = Counter(f"{row['status']}: {(row['status_reason'] or '').split(':')[0]}" for row in rows)
            refused = sum(row["refused"] for row in rows)
            print(
                f"pool race {repetition}: {len(placed)} of {3 * ROOM} placed, {on_pool} GB on the pool, "
                f"{refused} claims refused, {others}"
            )
            assert len(placed) == ROOM, others
            assert on_pool == ROOM * VOLUME_GB
            assert sum(n for status, n in others.items() if status == "unschedulable: storage") == 2 * ROOM, others
            assert (await snapshot.shared_pools())[POOL].allocated_gb == ROOM * VOLUME_GB
            await asyncio.gather(*(delete(api, vm_id) for vm_id in vm_ids))
            await eventually(
                snapshot.shared_pools,
                lambda pools: pools[POOL].allocated_gb == 0,
                timeout=120,
                what="every volume given back",
            )
            await eventually(
                lambda: api.delete(f"/v1/storage-pools/{POOL}"),
                lambda r: r.status_code == 204,
                timeout=120,
                what="the pool deleted once no VM is on it",
            )
    finally:
        await redis.aclose()


@pytest.fixture(scope="module")
def stores(servers: Servers) -> Iterator[Stores]:
    with module_stores(servers, "poolrace") as opened:
        yield opened


def test_concurrent_claims_and_commits_never_overfill_a_shared_pool(stores: Stores) -> None:
    """The same race without schedulers, so that it is sure to be one: 3N claims on a pool with room
    for N, all at once on 10 hosts, exactly N taken in Redis; and, apart, 3N commits of one VM each
    at once, exactly N placed by PostgreSQL's guard (its lock on the pool's row)."""
    stores.loop.run(_race_redis(stores))
    stores.loop.run(_race_postgresql(stores))


async def _race_redis(stores: Stores) -> None:
    snapshot, pool = stores.snapshot, f"race-{uuid.uuid4().hex[:6]}"
    hosts = [f"hv-{uuid.uuid4().hex[:8]}" for _ in range(10)]
    zero = Resources(cpu=0, memory_mb=0, disk_gb=0)
    reach = [StoragePool(name=pool, kind=PoolKind.SHARED)]
    writes = [
        HostWrite(
            host,
            Resources(cpu=64, memory_mb=65536, disk_gb=1000),
            Overcommit(),
            zero,
            {},
            "online",
            time.time(),
            False,
            zero,
            0,
            storage_pools=reach,
        )
        for host in hosts
    ]
    await snapshot.record_heartbeats(writes, bump_interval=60.0)
    await put_shared_pool(stores.redis, snapshot.prefix, pool, ROOM * VOLUME_GB, [])
    claims = [
        Claim(uuid.uuid4(), hosts[i % len(hosts)], SMALL, pools=(PoolTake(pool, VOLUME_GB),)) for i in range(3 * ROOM)
    ]
    gate = asyncio.Semaphore(16)  # as many at once as the Redis client's connections allow

    async def claim_one(claim: Claim) -> Claimed:
        async with gate:
            return await snapshot.claim_many([claim], time.time())

    results = await asyncio.gather(*(claim_one(claim) for claim in claims))
    outcomes = Counter(claimed.results[0].outcome for claimed in results)
    assert outcomes == Counter({"claimed": ROOM, "storage": 2 * ROOM})
    assert (await snapshot.shared_pools())[pool].allocated_gb == ROOM * VOLUME_GB


async def _race_postgresql(stores: Stores) -> None:
    pool = f"race-{uuid.uuid4().hex[:6]}"
    hosts = [f"hv-{uuid.uuid4().hex[:8]}" for _ in range(10)]
    vms = [uuid.uuid4() for _ in range(3 * ROOM)]
    async with stores.engine.begin() as connection:
        for host in hosts:
            await connection.execute(
                text(
                    "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, storage_pools) "
                    "VALUES (:id, 'online', 64, 65536, 1000, CAST(:pools AS jsonb))"
                ),
                {"id": host, "pools": pools_json([StoragePool(name=pool, kind=PoolKind.SHARED)])},
            )
        await connection.execute(
            text("INSERT INTO storage_pools (name, capacity_gb) VALUES (:n, :c)"), {"n": pool, "c": ROOM * VOLUME_GB}
        )
        for vm_id in vms:
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, cpu, memory_mb, disk_gb, volumes) VALUES "
                    "(:id, 'race', 'pending', 1, 512, 1, CAST(:volumes AS jsonb))"
                ),
                {"id": vm_id, "volumes": f'[{{"size_gb": {VOLUME_GB}, "tags": []}}]'},
            )
    record = PlacementRecord(strategy=Strategy.BEST_FIT, host=None, considered=1, eligible=1,
                             decided_at="2026-01-01T00:00:00Z", decision_us=1.0)  # fmt: skip
    storage = VolumePlacement((pool,), (PoolTake(pool, VOLUME_GB),))
    placements = [
        Placement(vm_id, 1, hosts[i % len(hosts)], SMALL, Strategy.BEST_FIT, record, storage=storage)
        for i, vm_id in enumerate(vms)
    ]
    settled = await asyncio.gather(*(stores.ledger.settle([placement], []) for placement in placements))
    outcomes = Counter(s.placements[0].outcome for s in settled)
    assert outcomes == Counter({Committed.PLACED: ROOM, Committed.HOST_REFUSED: 2 * ROOM})
    async with stores.engine.connect() as connection:
        on_pool = (
            await connection.execute(text("SELECT sum(size_gb) FROM vm_volumes WHERE pool = :n"), {"n": pool})
        ).scalar_one()
    assert on_pool == ROOM * VOLUME_GB
