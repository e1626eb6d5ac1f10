"""Clients for the three servers, built from the settings in one place."""

from __future__ import annotations

from redis.asyncio import Redis

from vmsched_common.settings import Settings
from vmsched_common.snapshot import Snapshot


def connect_redis(settings: Settings) -> Redis:
    return Redis.from_url(
        str(settings.redis_url),
        decode_responses=True,
        health_check_interval=10,
        socket_connect_timeout=5,
        socket_timeout=10,
        retry_on_timeout=True,
    )


def snapshot_for(settings: Settings, redis: Redis | None = None) -> Snapshot:
    return Snapshot(redis or connect_redis(settings), settings.redis_key_prefix)
