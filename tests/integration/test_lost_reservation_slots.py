"""Held reservation slots on a host that is lost (vmsched_scheduler.lost_slots): placed again on
another host that fits them, or counted as ``lost`` with the reason while none does. The host's
loss is brought forward (its last heartbeat moved an hour back) rather than waited out: the stack's
lost timeout is the default five minutes. A fenced host is lost at once, its agent heard or not."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.moving import disagreements, host_shares
from tests.integration.test_reservations import on
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources
from vmsched_redis.snapshot import Snapshot


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


def spec(host_id: str, suite: str, cpu: int) -> HostSpec:
    return HostSpec(id=host_id, capacity=Resources(cpu=cpu, memory_mb=65536, disk_gb=1000), labels={"suite": suite})


async def online(admin: httpx.AsyncClient, fleet: SimulatedFleet, host_id: str) -> None:
    await fleet.start()
    await eventually(
        lambda: admin.get(f"/v1/hosts/{host_id}"),
        lambda r: r.status_code == 200 and r.json()["status"] == "online",
        timeout=60,
        what=f"host {host_id} online",
    )


async def lose(servers: Servers, fleet: SimulatedFleet, host_id: str) -> None:
    """The host falls silent, and is taken to have been silent for an hour: offline in PostgreSQL
    and in the snapshot, as the gateway marks it (a snapshot left saying "online" would have the
    schedulers wait for the gateway to mark it, for other tests' VMs too).

    A heartbeat the agent sent just before the cut may still be on its way to the gateway's fold,
    which sets ``last_heartbeat = now()`` and the host online again: the rewrite waits until the
    host's row has not been refreshed for a few heartbeat intervals, so that no fold lands after it
    (one did in CI, and the host was taken for heard again)."""
    await fleet.cut_off(host_id)
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        await eventually(
            lambda: conn.fetchval(
                "SELECT last_heartbeat < now() - interval '3 seconds' FROM hosts WHERE id = $1", host_id
            ),
            lambda quiet: bool(quiet),
            timeout=30,
            what=f"the last heartbeat of {host_id} folded",
        )
        await conn.execute(
            "UPDATE hosts SET status = 'offline', last_heartbeat = now() - interval '1 hour' WHERE id = $1", host_id
        )
    finally:
        await conn.close()
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    try:
        await Snapshot(redis, servers.redis_key_prefix).set_host_fields(host_id, {"status": "offline"})
    finally:
        await redis.aclose()


async def held_on(admin: httpx.AsyncClient, suite: str, count: int, cpu: int) -> dict[str, Any]:
    body = {
        "project": "default",
        "cpu": cpu,
        "memory_mb": 1024,
        "disk_gb": 10,
        "count": count,
        "host_selector": on(suite),
    }
    created = await admin.post("/v1/reservations", json=body)
    assert created.status_code == 201, created.text
    reservation: dict[str, Any] = (
        await eventually(
            lambda: admin.get(f"/v1/reservations/{created.json()['id']}"),
            lambda r: r.json()["status"] != "pending",
            timeout=30,
            what="the reservation placed",
        )
    ).json()
    assert reservation["status"] == "held", reservation
    return reservation


async def test_held_slots_on_a_lost_host_are_placed_again_on_another(
    admin: httpx.AsyncClient,
    servers: Servers,
) -> None:
    suite = f"lost-{uuid.uuid4().hex[:6]}"
    first, second = f"{suite}-a", f"{suite}-b"
    async with await enrolled_fleet(servers, [spec(first, suite, 8)], heartbeat_interval=1.0) as lost_fleet:
        await online(admin, lost_fleet, first)
        reservation = await held_on(admin, suite, count=2, cpu=3)
        assert reservation["hosts"] == [first]
        async with await enrolled_fleet(servers, [spec(second, suite, 8)], heartbeat_interval=1.0) as other:
            await online(admin, other, second)
            await lose(servers, lost_fleet, first)

            moved = (
                await eventually(
                    lambda: admin.get(f"/v1/reservations/{reservation['id']}"),
                    lambda r: r.json()["hosts"] == [second] and r.json()["held"] == 2,
                    timeout=30,
                    what="the lost host's slots held on the other host",
                )
            ).json()
            assert (moved["status"], moved["lost"], moved["used"]) == ("held", 0, 0)
            assert "placed again" in moved["status_reason"], moved
            shares = await eventually(
                lambda: host_shares(servers, [first, second]),
                lambda found: not disagreements(found),
                timeout=30,
                what="PostgreSQL's and Redis's allocations to agree",
            )
            assert [s.recorded[0] for s in shares] == [0, 6]  # cpu: the lost host holds nothing any more

            # The room is usable: the project's VM takes a slot there.
            vm = await admin.post(
                "/v1/vms",
                json={
                    "name": "on-moved-slot",
                    "cpu": 3,
                    "memory_mb": 1024,
                    "disk_gb": 10,
                    "reservation": reservation["id"],
                },
            )
            assert vm.status_code == 202, vm.text
            placed = await eventually(
                lambda: admin.get(f"/v1/vms/{vm.json()['id']}"),
                lambda r: r.json()["status"] in ("scheduled", "running"),
                timeout=30,
                what="the VM on the moved slot",
            )
            assert placed.json()["hypervisor_id"] == second
            await admin.delete(f"/v1/vms/{vm.json()['id']}")
        await admin.delete(f"/v1/reservations/{reservation['id']}")


async def test_held_slots_of_a_lost_host_that_fit_nowhere_are_counted_lost_with_the_reason(
    admin: httpx.AsyncClient,
    servers: Servers,
) -> None:
    suite = f"lost-{uuid.uuid4().hex[:6]}"
    first, small = f"{suite}-a", f"{suite}-small"
    async with await enrolled_fleet(servers, [spec(first, suite, 8)], heartbeat_interval=1.0) as lost_fleet:
        await online(admin, lost_fleet, first)
        reservation = await held_on(admin, suite, count=2, cpu=3)
        async with await enrolled_fleet(servers, [spec(small, suite, 4)], heartbeat_interval=1.0) as other:
            await online(admin, other, small)
            await lose(servers, lost_fleet, first)

            lost = (
                await eventually(
                    lambda: admin.get(f"/v1/reservations/{reservation['id']}"),
                    lambda r: r.json()["lost"] == 2 and "nowhere" in (r.json()["status_reason"] or ""),
                    timeout=30,
                    what="the reservation to say it lost its slots",
                )
            ).json()
            assert (lost["status"], lost["held"], lost["hosts"]) == ("held", 0, [])
            shares = await host_shares(servers, [first, small])
            assert [s.recorded[0] for s in shares] == [0, 0]

            ended = await admin.delete(f"/v1/reservations/{reservation['id']}")
            assert ended.status_code in (200, 202, 204), ended.text
            after = (await admin.get(f"/v1/reservations/{reservation['id']}")).json()
            assert (after["status"], after["lost"]) == ("released", 0)


async def test_held_slots_on_a_fenced_host_are_placed_again_at_once_though_its_agent_still_heartbeats(
    admin: httpx.AsyncClient,
    servers: Servers,
) -> None:
    suite = f"fenced-{uuid.uuid4().hex[:6]}"
    first, second = f"{suite}-a", f"{suite}-b"
    async with await enrolled_fleet(servers, [spec(first, suite, 8)], heartbeat_interval=1.0) as fenced_fleet:
        await online(admin, fenced_fleet, first)
        reservation = await held_on(admin, suite, count=2, cpu=3)
        assert reservation["hosts"] == [first]
        async with await enrolled_fleet(servers, [spec(second, suite, 8)], heartbeat_interval=1.0) as other:
            await online(admin, other, second)
            # The operator knows the host is down; nothing waits for a lost timeout (and its agent,
            # still heard, does not hold the room either).
            fenced = await admin.post(f"/v1/hosts/{first}/fence")
            assert fenced.status_code == 200, fenced.text
            try:
                moved = (
                    await eventually(
                        lambda: admin.get(f"/v1/reservations/{reservation['id']}"),
                        lambda r: r.json()["hosts"] == [second] and r.json()["held"] == 2,
                        timeout=30,
                        what="the fenced host's slots held on the other host",
                    )
                ).json()
                assert (moved["status"], moved["lost"]) == ("held", 0)
                assert "placed again" in moved["status_reason"], moved
                shares = await eventually(
                    lambda: host_shares(servers, [first, second]),
                    lambda found: not disagreements(found),
                    timeout=30,
                    what="PostgreSQL's and Redis's allocations to agree",
                )
                assert [s.recorded[0] for s in shares] == [0, 6]  # cpu: the fenced host holds nothing
            finally:
                assert (await admin.delete(f"/v1/hosts/{first}/fence")).status_code == 200
                await admin.delete(f"/v1/reservations/{reservation['id']}")
