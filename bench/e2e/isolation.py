"""An own RabbitMQ virtual host, PostgreSQL database and Redis key prefix on the local servers for
each stack the harness runs (as tests/servers.py does for the tests), removed afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import redis

from bench.e2e.plan import BASE_AMQP, BASE_DB, BASE_REDIS, HEARTBEAT_INTERVAL


@dataclass
class Isolated:
    env: dict[str, str]
    database: str
    prefix: str


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


async def _drop_database(database: str) -> None:
    parts = urlsplit(BASE_DB.replace("postgresql+asyncpg://", "postgresql://", 1))
    conn = await asyncpg.connect(
        host=parts.hostname, port=parts.port or 5432, user=parts.username or "postgres", database="postgres"
    )
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        await conn.close()


@contextlib.contextmanager
def isolated(**env: str) -> Iterator[Isolated]:
    """An own vhost, database and Redis key prefix (as tests/servers.py), removed afterwards."""
    run_id = uuid.uuid4().hex[:10]
    vhost, database, prefix = f"vmsched-bench-{run_id}", f"vmsched_bench_{run_id}", f"vmsched-bench-{run_id}"
    _rabbitmqctl("add_vhost", vhost)
    _rabbitmqctl("set_permissions", "-p", vhost, urlsplit(BASE_AMQP).username or "guest", ".*", ".*", ".*")
    amqp = urlsplit(BASE_AMQP)
    db = urlsplit(BASE_DB)
    full_env = {
        "VMSCHED_AMQP_URL": urlunsplit((amqp.scheme, amqp.netloc, "/" + quote(vhost, safe=""), "", "")),
        "VMSCHED_REDIS_URL": BASE_REDIS,
        "VMSCHED_DATABASE_URL": urlunsplit((db.scheme, db.netloc, "/" + database, "", "")),
        "VMSCHED_REDIS_KEY_PREFIX": prefix,
        # INFO, as operators run it (and the services' readiness lines are INFO).
        "VMSCHED_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "INFO"),
        "VMSCHED_AGENT_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL),
        "VMSCHED_AGENT_OFFLINE_TIMEOUT": str(HEARTBEAT_INTERVAL * 3),
        # Thousands of simulated hosts share one connection as the services' user, which only a gateway
        # that takes any user's word accepts (docs/security.md): a broker user and connection per host
        # would measure the fleet process, not vmsched.
        "VMSCHED_AGENT_AUTH": "off",
        **env,
    }
    try:
        yield Isolated(full_env, database, prefix)
    finally:
        with contextlib.suppress(Exception):
            _rabbitmqctl("delete_vhost", vhost)
        with contextlib.suppress(Exception):
            asyncio.run(_drop_database(database))
        with contextlib.suppress(Exception):
            client = redis.Redis.from_url(BASE_REDIS)
            keys = list(client.scan_iter(match=f"{prefix}:*", count=5000))
            for start in range(0, len(keys), 1000):
                client.delete(*keys[start : start + 1000])
