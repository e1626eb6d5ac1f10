"""What-if on live state, on the real servers: POST /v1/placement/simulate and GET /v1/capacity answer
from the capacity snapshot as a scheduler reads it, against a fleet known to the last vCPU, and never
change a byte of Redis or PostgreSQL.

The world is this module's own: an API process on a Redis key prefix and a database of its own, no
scheduler, gateway or agent beside it, so that nothing else writes while the bytes are compared. The
fleet is written by the code that writes it in production (heartbeats folded in, a claim).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis
from sqlalchemy import make_url

from devtools.stack import Stack, api_client, free_port, wait_for
from tests.integration.conftest import stack_env
from tests.integration.rows import online_host
from tests.integration.test_identity import new_project, new_token
from tests.servers import Servers, copy_database
from vmsched_contract.messages import Resources
from vmsched_redis.snapshot import Snapshot

MEMORY = 65536
DISK = 1000


@dataclass(frozen=True, slots=True)
class World:
    stack: Stack
    redis_url: str
    prefix: str
    database_dsn: str  # asyncpg's form


def _fleet() -> list[Any]:
    def host(host_id: str, cpu: int, zone: str, **options: Any) -> Any:
        write = online_host(host_id, Resources(cpu=cpu, memory_mb=MEMORY, disk_gb=DISK), labels={"zone": zone})
        return type(write)(**{**{f: getattr(write, f) for f in write.__dataclass_fields__}, **options})

    return [
        host("wi-a", 16, "z1"),  # 8 of its 16 vCPUs claimed below
        host("wi-b", 16, "z1"),
        host("wi-c", 32, "z2", paused=True),
        host("wi-d", 4, "z2"),
    ]


@pytest.fixture(scope="module")
def world(servers: Servers, schema_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    import asyncio

    own = uuid.uuid4().hex[:8]
    prefix = f"{servers.redis_key_prefix}-whatif-{own}"
    url = make_url(servers.database_url)
    database = url.set(database=f"{url.database}_whatif_{own}").render_as_string(hide_password=False)
    dsn = database.replace("postgresql+asyncpg://", "postgresql://", 1)

    async def build() -> None:
        client = aioredis.from_url(servers.redis_url, decode_responses=True)
        try:
            snapshot = Snapshot(client, prefix)
            await snapshot.record_heartbeats(_fleet(), bump_interval=5.0)
            claimed = await snapshot.claim(uuid.uuid4(), "wi-a", Resources(cpu=8, memory_mb=0, disk_gb=0), time.time())
            assert claimed.holds
            await snapshot.next_round_robin(5)
        finally:
            await client.aclose()

    async def tear_down() -> None:
        client = aioredis.from_url(servers.redis_url, decode_responses=True)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
        admin = await asyncpg.connect(dsn.rsplit("/", 1)[0] + "/postgres")
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{make_url(database).database}" WITH (FORCE)')
        finally:
            await admin.close()

    # A copy of the run's migrated template: the API finds its schema current.
    copy_database(servers.database_url, schema_template, str(make_url(database).database))
    asyncio.run(build())
    env = {
        **stack_env(servers, VMSCHED_REDIS_KEY_PREFIX=prefix, VMSCHED_DATABASE_URL=database),
        # The heartbeats above are the last: hosts stay online to the engine for the whole module.
        "VMSCHED_AGENT_OFFLINE_TIMEOUT": "3600",
        "VMSCHED_AGENT_LOST_TIMEOUT": "7200",
        "VMSCHED_SCHEDULING_STRATEGY": "best_fit",
    }
    stack = Stack(env=env, log_dir=Path(tmp_path_factory.mktemp("whatif-logs")), api_port=free_port())
    try:
        api = stack.start_api()
        wait_for(api.is_ready, 60, "the what-if API to be ready")
        yield World(stack, servers.redis_url, prefix, dsn)
    finally:
        stack.stop()
        asyncio.run(tear_down())


@pytest.fixture
async def admin(world: World) -> AsyncIterator[httpx.AsyncClient]:
    async with world.stack.async_client(timeout=30) as client:
        yield client


def vms(*cpus: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"name": f"w-{i}", "cpu": cpu, "memory_mb": 1024, "disk_gb": 10, **extra} for i, cpu in enumerate(cpus)]


async def test_simulate_places_in_order_each_vm_seeing_the_earlier_ones(admin: httpx.AsyncClient) -> None:
    answer = await admin.post("/v1/placement/simulate", json={"vms": vms(8, 8, 8, 8, 2)})
    assert answer.status_code == 200, answer.text
    result = answer.json()
    # best_fit (the cluster default here): wi-a has 8 left and fills first; then wi-b takes two; the
    # fourth fits nowhere (wi-c paused, wi-d has 4); the last, 2 vCPUs, fits only on wi-d.
    assert [p["host"] for p in result["placements"]] == ["wi-a", "wi-b", "wi-b", None, "wi-d"]
    assert (result["placed"], result["unplaced"]) == (4, 1)
    fourth = result["placements"][3]
    assert (fourth["reason"], fourth["rejections"]) == ("cpu", {"paused": 1, "cpu": 3})
    assert fourth["detail"] == "none of 4 hosts fits (paused: 1, cpu: 3)"
    assert {example["host"] for example in fourth["examples"]["cpu"]} == {"wi-a", "wi-b", "wi-d"}
    assert all(p["strategy"] == "best_fit" for p in result["placements"])


async def test_simulate_without_hosts_and_with_another_strategy(admin: httpx.AsyncClient) -> None:
    body = {"vms": vms(2, 2, 2), "without_hosts": ["wi-a"], "strategy": "round_robin"}
    result = (await admin.post("/v1/placement/simulate", json=body)).json()
    # The cursor is read, not taken: 5 were taken, so the next is 6; of the 3 hosts left (wi-b, wi-c,
    # wi-d) round robin starts at 6 % 3 = 0 among those that pass (wi-b, wi-d).
    hosts = [p["host"] for p in result["placements"]]
    assert set(hosts) == {"wi-b", "wi-d"}
    assert "wi-a" not in hosts
    assert result["without_hosts"] == ["wi-a"]
    assert all(p["considered"] == 3 for p in result["placements"])
    own = await admin.post("/v1/placement/simulate", json={"vms": vms(1, strategy="least_loaded")})
    assert own.json()["placements"][0]["strategy"] == "least_loaded"


async def test_simulate_refuses_unknown_hosts_and_server_groups(admin: httpx.AsyncClient) -> None:
    unknown = await admin.post("/v1/placement/simulate", json={"vms": vms(1), "without_hosts": ["wi-zz"]})
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["body", "without_hosts"]
    grouped = await admin.post("/v1/placement/simulate", json={"vms": vms(1, server_group=str(uuid.uuid4()))})
    assert grouped.status_code == 422
    assert grouped.json()["detail"][0]["loc"] == ["body", "vms", 0, "server_group"]


async def test_capacity_counts_per_host_per_zone_and_in_total(admin: httpx.AsyncClient) -> None:
    answer = await admin.get("/v1/capacity", params={"cpu": 4, "memory_mb": 1024, "disk_gb": 10})
    assert answer.status_code == 200, answer.text
    capacity = answer.json()
    assert capacity["shape"] == {"cpu": 4, "memory_mb": 1024, "disk_gb": 10, "gpu": 0, "networks": []}
    assert [(h["host"], h["zone"], h["fits"], h["refused_by"]) for h in capacity["hosts"]] == [
        ("wi-a", "z1", 2, None),
        ("wi-b", "z1", 4, None),
        ("wi-c", "z2", 0, "paused"),
        ("wi-d", "z2", 1, None),
    ]
    assert capacity["zones"] == [{"zone": "z1", "fits": 6, "hosts": 2}, {"zone": "z2", "fits": 1, "hosts": 1}]
    assert capacity["total"] == 7
    # Memory the scarcest: 65536 // 20000 = 3 a host, where cpu allows.
    by_memory = (await admin.get("/v1/capacity", params={"cpu": 1, "memory_mb": 20000})).json()
    assert [h["fits"] for h in by_memory["hosts"]] == [3, 3, 0, 3]
    gpus = (await admin.get("/v1/capacity", params={"cpu": 1, "gpu": 1})).json()
    assert (gpus["total"], {h["refused_by"] for h in gpus["hosts"]}) == (0, {"paused", "gpu"})


async def test_simulate_agrees_with_capacity(admin: httpx.AsyncClient) -> None:
    total = (await admin.get("/v1/capacity", params={"cpu": 4, "memory_mb": 1024, "disk_gb": 10})).json()["total"]
    result = (await admin.post("/v1/placement/simulate", json={"vms": vms(*[4] * (total + 1))})).json()
    assert result["placed"] == total
    assert result["placements"][-1]["host"] is None


async def _redis_state(world: World) -> dict[str, Any]:
    client = aioredis.from_url(world.redis_url, decode_responses=True)
    state: dict[str, Any] = {}
    try:
        async for key in client.scan_iter(match=f"{world.prefix}:*"):
            kind = await client.type(key)
            if kind == "hash":
                value: Any = sorted((await client.hgetall(key)).items())
            elif kind == "set":
                value = sorted(await client.smembers(key))
            elif kind == "zset":
                value = await client.zrange(key, 0, -1, withscores=True)
            elif kind == "list":
                value = await client.lrange(key, 0, -1)
            else:
                value = await client.get(key)
            state[key] = (kind, value, await client.ttl(key) > 0)
    finally:
        await client.aclose()
    return state


async def _database_state(world: World) -> dict[str, list[str]]:
    connection = await asyncpg.connect(world.database_dsn)
    try:
        tables = await connection.fetch(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
        state = {}
        for row in tables:
            name = row["table_name"]
            rows = await connection.fetch(f'SELECT * FROM "{name}"')
            state[name] = sorted(repr(tuple(r.values())) for r in rows)
        return state
    finally:
        await connection.close()


async def test_simulate_and_capacity_change_not_a_byte_of_redis_or_postgresql(
    world: World, admin: httpx.AsyncClient
) -> None:
    project = await new_project(admin)
    reader = (await new_token(admin, project, "vms:read"))["token"]
    fleet_reader = (await new_token(admin, project, "hosts:read"))["token"]
    redis_before, database_before = await _redis_state(world), await _database_state(world)
    assert any(key.endswith(":rr") for key in redis_before)
    assert database_before["tokens"]
    async with (
        api_client(world.stack.api_url, reader, timeout=30) as vms_reader,
        api_client(world.stack.api_url, fleet_reader, timeout=30) as hosts_reader,
    ):
        for strategy in ("least_loaded", "best_fit", "round_robin", "random", "least_utilized"):
            body = {"vms": vms(8, 8, 8, 2, 64), "strategy": strategy, "without_hosts": ["wi-d"]}
            simulated = await vms_reader.post("/v1/placement/simulate", json=body)
            assert simulated.status_code == 200, simulated.text
            assert simulated.json()["placed"] >= 3
            assert (await hosts_reader.get("/v1/capacity", params={"cpu": 2, "memory_mb": 512})).status_code == 200
        # Each route needs its scope: vms:read for simulate, hosts:read for capacity.
        assert (await hosts_reader.post("/v1/placement/simulate", json={"vms": vms(1)})).status_code == 403
        assert (await vms_reader.get("/v1/capacity")).status_code == 403
    assert await _redis_state(world) == redis_before
    assert await _database_state(world) == database_before
