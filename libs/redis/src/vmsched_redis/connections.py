"""The Redis client every service builds from the settings, and how a service checks at start that
Redis answers."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis

from vmsched_runtime.reachability import CONNECT_TIMEOUT, Server
from vmsched_runtime.readiness import Check
from vmsched_runtime.settings import Settings

# How long a command waits for a free connection when all of the pool's are busy.
POOL_WAIT = 10.0


def connect_redis(settings: Settings) -> Redis:
    """A client whose commands wait for a free connection when ``redis_max_connections`` are busy,
    rather than failing at once: a restarted gateway taking its backlog (256 messages in flight)
    asked for more than redis-py's default pool of 100 allows, and each one over failed with
    ``MaxConnectionsError`` (30 in the hour's soak, each retried)."""
    pool = BlockingConnectionPool.from_url(
        str(settings.redis_url),
        max_connections=settings.redis_max_connections,
        timeout=POOL_WAIT,
        decode_responses=True,
        health_check_interval=10,
        socket_connect_timeout=5,
        socket_timeout=10,
        retry_on_timeout=True,
    )
    return Redis.from_pool(pool)


async def ping_redis(settings: Settings) -> None:
    """Return once Redis answers a PING, else raise why not."""
    client = Redis.from_url(str(settings.redis_url), socket_connect_timeout=CONNECT_TIMEOUT)
    try:
        await client.ping()
    finally:
        await client.aclose()


def redis_check(redis: Redis) -> Check:
    """Redis' part of a service's readiness (:mod:`vmsched_runtime.readiness`): it answers a PING."""

    async def check() -> None:
        await redis.ping()

    return check


def _redis_url(settings: Settings) -> str:
    return str(settings.redis_url)


# Redis, as a service's command line checks it before starting (vmsched_runtime.reachability).
REDIS = Server("Redis", "REDIS_URL", url=_redis_url, reach=ping_redis)
