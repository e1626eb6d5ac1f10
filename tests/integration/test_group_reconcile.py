"""After a Redis flush, reconciliation rebuilds each server group's members per domain from
PostgreSQL (plus the claims still in flight), and a released member gives its place back."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import delete_keys, online_host
from tests.servers import Servers
from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import Resources
from vmsched_domain.groups import GroupRule
from vmsched_redis.claims import Claim, GroupClaim
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.reconcile import reconcile

ROOMY = Resources(cpu=16, memory_mb=65536, disk_gb=1000)
SMALL = Resources(cpu=1, memory_mb=512, disk_gb=5)


@pytest.fixture
async def snapshot(servers: Servers) -> AsyncIterator[Snapshot]:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    prefix = f"{servers.redis_key_prefix}-group-reconcile-{uuid.uuid4().hex[:6]}"
    try:
        yield Snapshot(redis, prefix)
    finally:
        await delete_keys(redis, prefix)
        await redis.aclose()


async def test_a_flushed_groups_counts_come_back_from_postgresql_with_the_claims_in_flight(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    rule = GroupRule(uuid.uuid4(), GroupPolicy.SPREAD, "zone")
    running = [(uuid.uuid4(), "hv-g1"), (uuid.uuid4(), "hv-g1"), (uuid.uuid4(), "hv-g2")]
    gone = uuid.uuid4()
    async with private_engine.begin() as connection:
        await connection.execute(
            text("INSERT INTO server_groups (id, name, policy, topology_key) VALUES (:id, 'g', 'spread', 'zone')"),
            {"id": rule.id},
        )
        for host, zone in (("hv-g1", "z1"), ("hv-g2", "z2"), ("hv-g3", "z3")):
            await connection.execute(
                text(
                    "INSERT INTO hosts (id, status, labels, cpu, memory_mb, disk_gb) "
                    "VALUES (:id, 'online', CAST(:labels AS jsonb), 16, 65536, 1000)"
                ),
                {"id": host, "labels": f'{{"zone": "{zone}"}}'},
            )
        for vm_id, host, status in [*((v, h, "running") for v, h in running), (gone, "hv-g2", "deleted")]:
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb, server_group) "
                    "VALUES (:id, 'm', :status, :host, 1, 512, 5, :group)"
                ),
                {"id": vm_id, "status": status, "host": host, "group": rule.id},
            )
        for host, members in (("hv-g1", 2), ("hv-g2", 1)):  # what the members hold, as the settlement adds it
            await connection.execute(
                text(
                    "UPDATE hosts SET alloc_cpu = :n, alloc_memory_mb = 512 * :n, alloc_disk_gb = 5 * :n, "
                    "vm_count = :n WHERE id = :id"
                ),
                {"id": host, "n": members},
            )
    # As after a flush: the hosts are back from their heartbeats, the group's counts are gone, but a
    # scheduler has just claimed a member on hv-g3 and not committed it yet; and a stale count lingers.
    await snapshot.record_heartbeats(
        [online_host(h, ROOMY, labels={"zone": z}) for h, z in (("hv-g1", "z1"), ("hv-g2", "z2"), ("hv-g3", "z3"))],
        bump_interval=5.0,
    )
    in_flight = uuid.uuid4()
    (claimed,) = (
        await snapshot.claim_many([Claim(in_flight, "hv-g3", SMALL, GroupClaim(rule, ("z1", "z2")))], time.time())
    ).results
    assert claimed.outcome == "claimed"
    await snapshot.redis.hset(snapshot.group_key(rule.id), "z9", "4")

    await reconcile(private_engine, snapshot)

    assert (await snapshot.group_members([rule.id]))[rule.id] == {"z1": 2, "z2": 1, "z3": 1}
    # The restored claims know their group: releasing a member gives its place back.
    await snapshot.release(running[0][0])
    await snapshot.release(in_flight)
    assert (await snapshot.group_members([rule.id]))[rule.id] == {"z1": 1, "z2": 1}
