"""All or nothing on the real servers: ``POST /v1/vms/batch`` with ``all_or_nothing`` places every VM
of the batch or none, and leaves no claim and no allocation behind, under concurrency too."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import Resources

HOST_CPU = 8
SETTLED = ("scheduled", "running", "unschedulable")


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


@pytest.fixture
async def two_hosts(stack: Stack, servers: Servers, api: httpx.AsyncClient) -> AsyncIterator[tuple[str, list[str]]]:
    """Two hosts of 8 vCPUs of this test's own; the suite label and their ids."""
    suite = f"gang-{uuid.uuid4().hex[:6]}"
    hosts = [
        HostSpec(
            id=f"{suite}-{n}", capacity=Resources(cpu=HOST_CPU, memory_mb=65536, disk_gb=1000), labels={"suite": suite}
        )
        for n in (1, 2)
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0):
        for host in hosts:
            await eventually(
                lambda host=host: api.get(f"/v1/hosts/{host.id}"),  # type: ignore[misc]
                lambda r: r.status_code == 200 and r.json()["status"] == "online",
                timeout=60,
                what="the hosts online",
            )
        yield suite, [h.id for h in hosts]


def batch(suite: str, *cpus: int, **extra: Any) -> dict[str, Any]:
    vms = [
        {"name": f"m{n}", "cpu": cpu, "memory_mb": 1024, "disk_gb": 10, "labels": {"suite": suite}}
        for n, cpu in enumerate(cpus)
    ]
    return {"vms": vms, "all_or_nothing": True, **extra}


async def post_gang(api: httpx.AsyncClient, body: dict[str, Any]) -> list[str]:
    response = await api.post("/v1/vms/batch", json=body)
    assert response.status_code == 202, response.text
    items = response.json()["items"]
    assert len({item["gang_id"] for item in items}) == 1
    assert items[0]["gang_id"] is not None
    return [item["id"] for item in items]


async def settled(api: httpx.AsyncClient, ids: list[str]) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]]:
        return [r.json() for r in await asyncio.gather(*(api.get(f"/v1/vms/{vm_id}") for vm_id in ids))]

    return await eventually(
        probe, lambda vms: all(vm["status"] in SETTLED for vm in vms), timeout=30, what="the batch settled"
    )


async def allocations(servers: Servers, host_ids: list[str]) -> dict[str, tuple[int, int, int]]:
    """Per host: PostgreSQL's alloc_cpu, the snapshot's a_cpu, and the claims the snapshot holds."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    try:
        rows = await conn.fetch("SELECT id, alloc_cpu FROM hosts WHERE id = ANY($1::text[])", host_ids)
        found = {}
        for row in rows:
            prefix = f"{servers.redis_key_prefix}:host:{row['id']}"
            snapshot_cpu = int(await redis.hget(prefix, "a_cpu") or 0)
            claims = int(await redis.scard(f"{prefix}:vms"))
            found[row["id"]] = (row["alloc_cpu"], snapshot_cpu, claims)
        return found
    finally:
        await conn.close()
        await redis.aclose()


async def test_a_batch_that_cannot_fit_whole_leaves_every_host_as_it_was(
    api: httpx.AsyncClient, two_hosts: tuple[str, list[str]], servers: Servers
) -> None:
    suite, host_ids = two_hosts
    before = await allocations(servers, host_ids)
    ids = await post_gang(api, batch(suite, 6, 6, 6))  # two fit, the third does not
    vms = await settled(api, ids)
    assert {vm["status"] for vm in vms} == {"unschedulable"}
    assert all(vm["hypervisor_id"] is None for vm in vms)
    reasons = sorted(vm["status_reason"].split(":")[0] for vm in vms)
    assert reasons == ["all_or_nothing", "all_or_nothing", "cpu"], reasons
    assert "1 of 3 VMs of the batch fit nowhere" in vms[0]["status_reason"]
    assert await allocations(servers, host_ids) == before


async def test_a_batch_that_fits_is_placed_whole(
    api: httpx.AsyncClient, two_hosts: tuple[str, list[str]], servers: Servers
) -> None:
    suite, host_ids = two_hosts
    ids = await post_gang(api, batch(suite, 4, 4, 4, 4))  # exactly the two hosts
    vms = await settled(api, ids)
    assert {vm["status"] for vm in vms} <= {"scheduled", "running"}
    assert sorted(vm["hypervisor_id"] for vm in vms) == sorted(host_ids * 2)
    after = await allocations(servers, host_ids)
    assert {host: found[:2] for host, found in after.items()} == {h: (HOST_CPU, HOST_CPU) for h in host_ids}


async def test_of_two_gangs_racing_for_room_for_one_exactly_one_is_placed_and_no_claim_is_left(
    api: httpx.AsyncClient, two_hosts: tuple[str, list[str]], servers: Servers
) -> None:
    suite, host_ids = two_hosts
    first, second = await asyncio.gather(post_gang(api, batch(suite, 8, 8)), post_gang(api, batch(suite, 8, 8)))
    gangs = [await settled(api, first), await settled(api, second)]
    outcomes = sorted(tuple(sorted(vm["status"] for vm in gang)) for gang in gangs)
    placed = ("running", "scheduled")
    assert len(outcomes) == 2
    assert outcomes[1] == ("unschedulable", "unschedulable"), outcomes
    assert set(outcomes[0]) <= set(placed), outcomes
    after = await allocations(servers, host_ids)
    assert after == {h: (HOST_CPU, HOST_CPU, 1) for h in host_ids}  # the winner's claims, nothing else


async def test_a_gang_may_not_wait(api: httpx.AsyncClient, two_hosts: tuple[str, list[str]]) -> None:
    suite, _ = two_hosts
    body = batch(suite, 1, 1)
    body["vms"][1]["wait_s"] = 60
    response = await api.post("/v1/vms/batch", json=body)
    assert response.status_code == 422
    assert "wait_s" in response.text


async def test_a_batch_whose_server_group_cannot_take_every_member_leaves_every_host_as_it_was(
    api: httpx.AsyncClient, two_hosts: tuple[str, list[str]], servers: Servers
) -> None:
    suite, host_ids = two_hosts
    created = await api.post("/v1/server-groups", json={"name": f"g-{uuid.uuid4().hex[:6]}", "policy": "anti-affinity"})
    assert created.status_code == 201, created.text
    group = created.json()["id"]
    before = await allocations(servers, host_ids)
    three = batch(suite, 1, 1, 1)  # room enough, but anti-affinity allows one member per host: two
    for vm in three["vms"]:
        vm["server_group"] = group
    vms = await settled(api, await post_gang(api, three))
    assert {vm["status"] for vm in vms} == {"unschedulable"}
    assert sorted(vm["status_reason"].split(":")[0] for vm in vms) == [
        "all_or_nothing",
        "all_or_nothing",
        "server_group",
    ]
    assert await allocations(servers, host_ids) == before
    two = batch(suite, 1, 1)
    for vm in two["vms"]:
        vm["server_group"] = group
    placed = await settled(api, await post_gang(api, two))
    assert sorted(vm["hypervisor_id"] for vm in placed) == sorted(host_ids)
