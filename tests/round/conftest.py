"""Every round test runs twice: on the in-memory fakes, and on the real Redis and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import delete_keys
from tests.round.worlds import MemoryWorld, ServersWorld, World
from tests.servers import Servers
from vmsched_redis.connections import connect_redis
from vmsched_runtime.settings import Settings


@pytest.fixture
def memory_world() -> MemoryWorld:
    return MemoryWorld.build()


@pytest.fixture
async def servers_world(servers: Servers, private_engine: AsyncEngine) -> AsyncIterator[ServersWorld]:
    redis = connect_redis(Settings.from_environment(servers.env()))
    prefix = f"{servers.redis_key_prefix}-round-{uuid.uuid4().hex[:8]}"
    try:
        yield ServersWorld.build(private_engine, redis, prefix)
    finally:
        await delete_keys(redis, prefix)
        await redis.aclose()


# The hook in tests/conftest.py sees the fixtures a test names, not one fetched by name as it runs:
# the servers' world carries the mark itself, so that -m "not integration" leaves it out.
@pytest.fixture(params=["memory", pytest.param("servers", marks=pytest.mark.integration)])
def world(request: pytest.FixtureRequest) -> World:
    world: World = request.getfixturevalue(f"{request.param}_world")
    return world
