"""Measured usage on the real servers: the gateway folds it into the snapshot without announcing the
host for it; schedulers see it with the host's next announcement; ``least_utilized`` follows it."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.rows import delete_keys, online_host
from tests.integration.test_host_inventory import DeclaredQueues, NoOrphans
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import AgentHeartbeat, Resources, Usage
from vmsched_domain.usage import MeasuredUsage
from vmsched_gateway.heartbeats import HeartbeatFold
from vmsched_gateway.host_store import HostStore
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.fleet_cache import FleetCache

CAPACITY = Resources(cpu=16, memory_mb=65536, disk_gb=1000)
BUMP = 5.0  # the gateway's: offline timeout (15 s) / 3


@pytest.fixture
async def snapshot(servers: Servers) -> AsyncIterator[Snapshot]:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    prefix = f"{servers.redis_key_prefix}-usage-{uuid.uuid4().hex[:6]}"
    try:
        yield Snapshot(redis, prefix)
    finally:
        await delete_keys(redis, prefix)
        await redis.aclose()


def beat(host_id: str, usage: Usage | None) -> AgentHeartbeat:
    return AgentHeartbeat(agent_id=host_id, capacity=CAPACITY, usage=usage)


async def test_the_gateway_folds_usage_into_the_snapshot_beside_the_allocation_it_was_measured_against(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    anything: Any = None
    fold = HeartbeatFold(
        store=HostStore(private_engine),
        snapshot=snapshot,
        queues=DeclaredQueues(),
        orphans=NoOrphans(),  # type: ignore[arg-type]
        publisher=anything,
        offline_timeout=3 * BUMP,
    )
    await fold.on_heartbeat(beat("hv-u1", Usage(cpu_used=3.5, memory_used_mb=2048)))
    assert await snapshot.read_usage(["hv-u1"]) == {"hv-u1": MeasuredUsage(3.5, 2048, 0, 0)}

    # A scheduler claims 2 cores; the next measurement was taken against that allocation.
    claim = await snapshot.claim(uuid.uuid4(), "hv-u1", Resources(cpu=2, memory_mb=1024, disk_gb=1), time.time())
    assert claim.outcome == "claimed"
    seq = await snapshot.current_seq()
    await fold.on_heartbeat(beat("hv-u1", Usage(cpu_used=7.25, memory_used_mb=4096)))
    host = (await snapshot.read_hosts(["hv-u1"]))["hv-u1"]
    assert host is not None
    assert host.usage == MeasuredUsage(7.25, 4096, 2, 1024)
    # Only the usage moved: the host is not announced on the change feed for it.
    assert await snapshot.changed_since(seq) == (seq, {})

    # An agent that stops measuring: its host is ranked by allocation again.
    await fold.on_heartbeat(beat("hv-u1", None))
    assert await snapshot.read_usage(["hv-u1"]) == {"hv-u1": None}
    assert await snapshot.changed_since(seq) == (seq, {})


async def test_a_scheduler_sees_new_usage_at_the_hosts_next_announcement_not_before(snapshot: Snapshot) -> None:
    now = time.time()
    first = dataclasses.replace(
        online_host("hv-u2", CAPACITY), heartbeat_at=now, usage=Usage(cpu_used=1, memory_used_mb=0)
    )
    await snapshot.record_heartbeats([first], bump_interval=BUMP)
    cache = FleetCache(snapshot)
    await cache.refresh()

    def seen() -> float | None:
        host = cache.fleet.host("hv-u2")
        assert host is not None
        return None if host.usage is None else host.usage.cpu_used

    assert seen() == 1.0
    busier = dataclasses.replace(first, heartbeat_at=now + 1, usage=Usage(cpu_used=12, memory_used_mb=0))
    await snapshot.record_heartbeats([busier], bump_interval=BUMP)
    await cache.refresh()
    assert seen() == 1.0  # written, not announced: this copy is up to one bump interval behind
    announced = dataclasses.replace(busier, heartbeat_at=now + BUMP, usage=Usage(cpu_used=14, memory_used_mb=0))
    await snapshot.record_heartbeats([announced], bump_interval=BUMP)
    await cache.refresh()
    assert seen() == 14.0


async def test_a_scheduler_keeps_a_hosts_usage_till_its_usage_refresh_interval_is_over(snapshot: Snapshot) -> None:
    now = time.time()
    first = dataclasses.replace(
        online_host("hv-u3", CAPACITY), heartbeat_at=now, usage=Usage(cpu_used=1, memory_used_mb=0)
    )
    await snapshot.record_heartbeats([first], bump_interval=BUMP)
    cache = FleetCache(snapshot, usage_refresh_interval=2.0)
    await cache.refresh()

    def seen() -> tuple[float | None, float]:
        host = cache.fleet.host("hv-u3")
        assert host is not None
        return (None if host.usage is None else host.usage.cpu_used), host.last_heartbeat

    assert seen() == (1.0, now)
    # Announced with a new usage within the interval: the heartbeat is taken, the usage kept.
    announced = dataclasses.replace(first, heartbeat_at=now + BUMP, usage=Usage(cpu_used=14, memory_used_mb=0))
    await snapshot.record_heartbeats([announced], bump_interval=BUMP)
    await cache.refresh(force_full=True)
    assert seen() == (1.0, now + BUMP)

    # Read again once the interval is over: the usage it brings is taken.
    async def reread() -> tuple[float | None, float]:
        await cache.reread(["hv-u3"])
        return seen()

    await eventually(
        reread, lambda view: view == (14.0, now + BUMP), timeout=15, what="the usage taken once the interval is over"
    )


async def test_a_least_utilized_vm_lands_on_the_host_that_measures_less_busy(stack: Stack, servers: Servers) -> None:
    """Two empty hosts alike but for their measured usage; the busy one has the lower id."""
    suite = f"usage-{uuid.uuid4().hex[:6]}"
    busy, quiet = f"{suite}-a", f"{suite}-b"
    hosts = [HostSpec(id=host_id, capacity=CAPACITY, labels={"suite": suite}) for host_id in (busy, quiet)]
    fleet = await enrolled_fleet(servers, hosts, heartbeat_interval=1.0)
    # Measured from the first heartbeat on: the schedulers read each host first when it is new.
    fleet.agents[busy].report_usage(Usage(cpu_used=14.0, memory_used_mb=60000))
    fleet.agents[quiet].report_usage(Usage(cpu_used=1.0, memory_used_mb=4096))
    async with fleet, stack.async_client(timeout=30) as api:
        await _online_with_usage(api, busy, 14.0)
        await _online_with_usage(api, quiet, 1.0)

        # Blind to usage, the two empty hosts tie and the lower id wins: the busy host.
        by_allocation = await _place(api, suite, "least_loaded")
        assert by_allocation["hypervisor_id"] == busy
        # Measured: 14 cores busy (and 1 more allocated since) against 1.
        by_usage = await _place(api, suite, "least_utilized")
        assert by_usage["hypervisor_id"] == quiet
        placement = (await api.get(f"/v1/vms/{by_usage['id']}/placement")).json()["decision"]
        assert placement["strategy"] == "least_utilized"

        for vm in (by_allocation, by_usage):
            assert (await api.delete(f"/v1/vms/{vm['id']}")).status_code == 202
        for vm in (by_allocation, by_usage):
            await _deleted(api, vm["id"])


async def _online_with_usage(api: httpx.AsyncClient, host_id: str, cpu_used: float) -> None:
    def shows(response: httpx.Response) -> bool:
        if response.status_code != 200:
            return False
        host = response.json()
        return bool(host["status"] == "online" and (host["usage"] or {}).get("cpu_used") == cpu_used)

    await eventually(lambda: api.get(f"/v1/hosts/{host_id}"), shows, timeout=60, what=f"{host_id} online with usage")


async def _deleted(api: httpx.AsyncClient, vm_id: str) -> None:
    await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"), lambda r: r.json()["status"] == "deleted", timeout=30, what="deleted"
    )


async def _place(api: httpx.AsyncClient, suite: str, strategy: str) -> dict[str, Any]:
    body = {"name": f"{suite}-{strategy}", "cpu": 1, "memory_mb": 1024, "disk_gb": 1, "labels": {"suite": suite}}
    created = await api.post("/v1/vms", json={**body, "strategy": strategy})
    assert created.status_code == 202, created.text
    found = await eventually(
        lambda: api.get(f"/v1/vms/{created.json()['id']}"),
        lambda r: r.json()["hypervisor_id"] is not None,
        timeout=30,
        what=f"the {strategy} VM placed",
    )
    vm: dict[str, Any] = found.json()
    return vm
