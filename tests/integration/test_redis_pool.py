"""The services' Redis client (:func:`vmsched_redis.connections.connect_redis`) on the real Redis:
more commands at once than it may open connections wait for one rather than fail, as a restarted
gateway's backlog (256 messages in flight) did against redis-py's default pool of 100."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.servers import Servers
from vmsched_redis.connections import connect_redis
from vmsched_runtime.settings import Settings


async def test_more_commands_at_once_than_connections_wait_for_one(servers: Servers, settings: Settings) -> None:
    narrow = settings.model_copy(update={"redis_max_connections": 2})
    client = connect_redis(narrow)
    key = f"{servers.redis_key_prefix}:pool-test:{uuid.uuid4()}"  # nobody pushes to it: each BLPOP waits
    try:
        started = time.monotonic()
        answers = await asyncio.gather(*(client.blpop([key], timeout=0.2) for _ in range(8)))
        took = time.monotonic() - started
    finally:
        await client.aclose()
    assert answers == [None] * 8
    # Two at a time: the eight waited for each other's connections, in four turns of 0.2 s.
    assert took >= 0.75, took
