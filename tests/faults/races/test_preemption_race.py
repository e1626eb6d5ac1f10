"""Four scheduler processes preempt at once: 20 VMs of high priority, each needing the room of two
low-priority VMs of a full fleet, submitted together. Every one is placed; exactly the VMs needed are
preempted, each for a preemptor placed on its own host (none for nothing); no host is overcommitted;
the snapshot equals PostgreSQL, counted from the rows."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import pytest

from devtools.stack import Stack
from tests.faults.conftest import online_fleet, submit, wait_settled
from tests.faults.invariants import check, snapshot_problems
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

SUITE = "preemptrace"
HOSTS = 10
HOST_CPU = 8
LOW_CPU = 2  # HOST_CPU // LOW_CPU of them fill a host
HIGH_CPU = 4  # each needs two low VMs' room
HIGH = 20


@pytest.fixture(scope="module")
async def preempt_fleet(four_schedulers: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    capacity = Resources(cpu=HOST_CPU, memory_mb=65536, disk_gb=1000)
    async with online_fleet(four_schedulers, servers, SUITE, HOSTS, capacity, heartbeat_interval=2.0) as fleet:
        yield fleet


def vms(kind: str, count: int, cpu: int, priority: int) -> list[dict[str, object]]:
    return [
        {"name": f"{kind}-{n}", "cpu": cpu, "memory_mb": 512, "disk_gb": 5, "labels": {"suite": SUITE},
         "priority": priority}
        for n in range(count)
    ]  # fmt: skip


async def test_four_schedulers_preempt_only_what_each_preemptor_needs_and_never_overcommit(
    four_schedulers: Stack, preempt_fleet: SimulatedFleet, servers: Servers
) -> None:
    async with four_schedulers.async_client(timeout=120) as api:
        low = await submit(api, vms("low", HOSTS * HOST_CPU // LOW_CPU, LOW_CPU, priority=0), batch=10)
        await wait_settled(servers, low, timeout=120)
        high = await submit(api, vms("high", HIGH, HIGH_CPU, priority=500), batch=2)  # ten requests at once
        await wait_settled(servers, high, timeout=180)
        conn = await asyncpg.connect(servers.asyncpg_dsn)
        try:
            highs = await conn.fetch("SELECT id, status, hypervisor_id FROM vms WHERE id = ANY($1::uuid[])", high)
            victims = await conn.fetch(
                "SELECT id, status, hypervisor_id, preempted_by FROM vms WHERE id = ANY($1::uuid[]) "
                "AND preempted_by IS NOT NULL",
                low,
            )
        finally:
            await conn.close()
        assert Counter(row["status"] for row in highs) == {"running": HIGH}
        where = {row["id"]: row["hypervisor_id"] for row in highs}
        per_preemptor = Counter(row["preempted_by"] for row in victims)
        print(f"preemption race: {len(victims)} preempted for {len(per_preemptor)} preemptors")
        # None preempted for nothing: each for a preemptor placed where it was, two per preemptor.
        assert all(row["hypervisor_id"] == where[row["preempted_by"]] for row in victims)
        assert set(per_preemptor.values()) == {HIGH_CPU // LOW_CPU}
        assert len(victims) == HIGH * HIGH_CPU // LOW_CPU
        # Each preemption, replayed from the journal of the replica that made it, chooses the same host
        # and the same victims, though four replicas raced for them.
        for vm_id in high:
            replayed = await api.get(f"/v1/vms/{vm_id}/placement/replay")
            assert replayed.status_code == 200, replayed.text
            replay = replayed.json()
            assert (replay["journal"]["kind"], replay["same"]) == ("preemption", True), replay
            mine = {str(row["id"]) for row in victims if str(row["preempted_by"]) == vm_id}
            assert set(replay["victims"]) == mine
        # Their agents deleted them; restart_policy never: they end failed.
        await eventually(
            lambda: count_failed(servers, [str(row["id"]) for row in victims]),
            lambda n: n == len(victims),
            timeout=60,
            what="every victim deleted and failed",
        )
        report = await check(servers.asyncpg_dsn, low + high, preempt_fleet)
        assert report.problems == [], report.problems
        # The snapshot is a cache of PostgreSQL: equal once the claims in flight are settled and the
        # periodic reconcile has run (a claim a swap left behind is dropped after its grace period).
        await eventually(
            lambda: snapshot_problems(servers.asyncpg_dsn, servers.redis_url, servers.redis_key_prefix, f"{SUITE}-"),
            lambda problems: problems == [],
            timeout=90,
            what="the Redis snapshot equal to PostgreSQL",
            interval=1.0,
        )


async def count_failed(servers: Servers, vm_ids: list[str]) -> int:
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM vms WHERE id = ANY($1::uuid[]) AND status = 'failed'", vm_ids
        )
        return count
    finally:
        await conn.close()
