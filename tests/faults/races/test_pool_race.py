"""Four scheduler processes race to fill one shared storage pool: a pool with room for exactly N
volumes, 3N VMs asking one volume each submitted at once over 20 hosts that all reach it: exactly N
are placed (a shared pool's space is counted once, whichever host and replica), the others end
unschedulable with reason ``storage``; PostgreSQL (the truth) and the Redis snapshot count the same.

Runs ``VMSCHED_POOL_RACES`` times (default 2).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import pytest
from redis.asyncio import Redis

from devtools.stack import Stack
from tests.faults.conftest import submit, wait_settled
from tests.faults.races.test_group_race import ALLOCATING, delete
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources
from vmsched_contract.storage import PoolKind, StoragePool
from vmsched_redis.snapshot import Snapshot

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SUITE = "poolrace"
POOL = f"{SUITE}-ceph"
HOSTS = 20
ROOM = 20  # N: the volumes the pool has room for
VOLUME_GB = 10
REPETITIONS = int(os.environ.get("VMSCHED_POOL_RACES", "2"))


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
            # Twelve requests at once, so that every replica takes some.
            vm_ids = await submit(api, bodies, batch=3 * ROOM // 12)
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
