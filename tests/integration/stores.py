"""The real Redis and PostgreSQL stores of the scheduler, for Hypothesis tests that compare a rule's
Python, Lua and SQL forms (test_fit_rule.py, test_group_rule.py): a database and a Redis key prefix
of the module's own, and an event loop in a thread (Hypothesis calls a test synchronously)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.servers import Servers, drop_database
from vmsched_contract.strategy import Strategy
from vmsched_pg.engine import create_engine
from vmsched_pg.schema_upgrade import upgrade_schema
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.ledger import PostgresLedger

T = TypeVar("T")


class LoopThread:
    """An event loop in a thread of its own: Hypothesis calls the test synchronously, and the servers'
    clients live on this loop for the whole module."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@dataclass
class Stores:
    loop: LoopThread
    engine: AsyncEngine
    redis: Redis
    snapshot: Snapshot
    ledger: PostgresLedger


@contextlib.contextmanager
def module_stores(servers: Servers, suffix: str) -> Iterator[Stores]:
    """A migrated database ``<run's database>_<suffix>`` and the Redis prefix ``<run's prefix>-<suffix>``,
    both removed at the end."""
    loop = LoopThread()
    base, name = servers.database_url.rsplit("/", 1)
    database = f"{base}/{name}_{suffix}"

    async def open_stores() -> Stores:
        await upgrade_schema(database)
        engine = create_engine(database, pool_size=2)
        redis = Redis.from_url(servers.redis_url, decode_responses=True)
        snapshot = Snapshot(redis, f"{servers.redis_key_prefix}-{suffix}")
        return Stores(loop, engine, redis, snapshot, PostgresLedger(engine, default_strategy=Strategy.BEST_FIT))

    opened = loop.run(open_stores())
    try:
        yield opened
    finally:

        async def close() -> None:
            keys = [key async for key in opened.redis.scan_iter(match=f"{opened.snapshot.prefix}:*")]
            if keys:
                await opened.redis.delete(*keys)
            await opened.redis.aclose()
            await opened.engine.dispose()

        loop.run(close())
        loop.close()
        drop_database(servers.database_url, f"{name}_{suffix}")
