"""The real servers a test run talks to, isolated from every other run.

Testcontainers starts fresh RabbitMQ, Redis and PostgreSQL containers where a Docker engine answers;
otherwise the local servers named by VMSCHED_AMQP_URL, VMSCHED_REDIS_URL and VMSCHED_DATABASE_URL are used, and this run
gets its own RabbitMQ virtual host, its own PostgreSQL database and its own Redis key prefix, all
removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import httpx
import redis

from vmsched_amqp.agent_identity import host_of_username
from vmsched_runtime.settings import Settings

LOCAL_AMQP = "amqp://guest:guest@127.0.0.1:5672/"
LOCAL_REDIS = "redis://127.0.0.1:6379/0"
LOCAL_DATABASE = "postgresql+asyncpg://postgres@127.0.0.1:5432/vmsched"


@dataclass
class Servers:
    amqp_url: str
    redis_url: str
    database_url: str
    redis_key_prefix: str
    run_id: str
    extra_env: dict[str, str] = field(default_factory=dict)
    # The broker is this run's alone (a container): a test may stop or restart it.
    private_broker: bool = False
    # Runs ``rabbitmqctl <args>`` against this run's broker (the local node or the container's).
    rabbitmqctl: Callable[..., str] = field(default=lambda *args: _rabbitmqctl(*args), repr=False)

    @property
    def broker(self) -> BrokerAccounts:
        """This run's broker's virtual hosts and users, through its management API."""
        return BrokerAccounts.of(self.env())

    def env(self, **overrides: str) -> dict[str, str]:
        """Environment for a vmsched process (or Settings) that talks to these servers."""
        env = {
            "VMSCHED_AMQP_URL": self.amqp_url,
            "VMSCHED_REDIS_URL": self.redis_url,
            "VMSCHED_DATABASE_URL": self.database_url,
            "VMSCHED_REDIS_KEY_PREFIX": self.redis_key_prefix,
            **self.extra_env,
        }
        env.update(overrides)
        return env

    @property
    def asyncpg_dsn(self) -> str:
        return self.database_url.replace("postgresql+asyncpg://", "postgresql://", 1)


@dataclass(frozen=True)
class BrokerAccounts:
    """Virtual hosts, users and permissions through RabbitMQ's management API: one HTTP call each,
    where every ``rabbitmqctl`` starts an Erlang VM of its own (a second or two, many times a run)."""

    management_url: str

    @classmethod
    def of(cls, env: dict[str, str]) -> BrokerAccounts:
        return cls(Settings.from_environment({**os.environ, **env}).management_url)

    def add_vhost(self, vhost: str, user: str) -> None:
        """Create ``vhost`` and give ``user`` every permission on it."""
        self._call("PUT", f"vhosts/{quote(vhost, safe='')}")
        self.grant(vhost, user)

    def delete_vhost(self, vhost: str) -> None:
        self._call("DELETE", f"vhosts/{quote(vhost, safe='')}")

    def add_user(self, user: str, password: str) -> None:
        self._call("PUT", f"users/{quote(user, safe='')}", {"password": password, "tags": ""})

    def delete_user(self, user: str) -> None:
        self._call("DELETE", f"users/{quote(user, safe='')}")

    def grant(self, vhost: str, user: str) -> None:
        """Every permission (configure, write, read) on ``vhost`` to ``user``."""
        every = {"configure": ".*", "write": ".*", "read": ".*"}
        self._call("PUT", f"permissions/{quote(vhost, safe='')}/{quote(user, safe='')}", every)

    def delete_agent_users(self, vhost: str) -> None:
        """Delete the broker users enrolled for agents of ``vhost`` (users outlive their virtual host),
        in one call: hundreds of ``rabbitmqctl delete_user`` take minutes."""
        users = self._call("GET", "users?columns=name").json()
        agents = [user["name"] for user in users if host_of_username(user["name"], vhost) is not None]
        if agents:
            self._call("POST", "users/bulk-delete", {"users": agents})

    def queue_type(self, vhost: str, queue: str) -> str:
        found = self._call("GET", f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}").json()
        kind: str = found["type"]
        return kind

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        url = httpx.URL(self.management_url)
        auth = (url.username, url.password) if url.username else None
        base = str(url.copy_with(username=None, password=None)).rstrip("/") + "/api"
        with httpx.Client(auth=auth, timeout=60) as client:
            return client.request(method, f"{base}/{path}", json=body).raise_for_status()


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def provide_servers() -> Iterator[Servers]:
    run_id = uuid.uuid4().hex[:10]
    if docker_engine_answers() and not os.environ.get("VMSCHED_TEST_LOCAL_SERVERS"):
        with _containers(run_id) as servers:
            yield servers
    else:
        with _local(run_id) as servers:
            yield servers


@contextlib.contextmanager
def _containers(run_id: str) -> Iterator[Servers]:
    from testcontainers.postgres import PostgresContainer
    from testcontainers.rabbitmq import RabbitMqContainer
    from testcontainers.redis import RedisContainer

    with (
        RabbitMqContainer("rabbitmq:3.10-management").with_exposed_ports(15672) as rabbit,
        RedisContainer("redis:7.0") as cache,
        PostgresContainer("postgres:15", driver="asyncpg") as pg,
    ):
        amqp = f"amqp://guest:guest@{rabbit.get_container_host_ip()}:{rabbit.get_exposed_port(5672)}/"
        # The -management image serves the management API (agents are enrolled through it).
        admin = f"http://guest:guest@{rabbit.get_container_host_ip()}:{rabbit.get_exposed_port(15672)}/"
        rurl = f"redis://{cache.get_container_host_ip()}:{cache.get_exposed_port(6379)}/0"

        def in_container(*args: str) -> str:
            code, output = rabbit.exec(["rabbitmqctl", "-q", *args])
            if code != 0:
                raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {output!r}")
            return bytes(output).decode()

        yield Servers(
            amqp,
            rurl,
            pg.get_connection_url(),
            f"vmsched-test-{run_id}",
            run_id,
            rabbitmqctl=in_container,
            private_broker=True,
            extra_env={"VMSCHED_AMQP_ADMIN_URL": admin},
        )


def _rabbitmqctl(*args: str) -> str:
    done = subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=120, text=True)
    return done.stdout


@contextlib.contextmanager
def _local(run_id: str) -> Iterator[Servers]:
    base_amqp = os.environ.get("VMSCHED_AMQP_URL", LOCAL_AMQP)
    base_redis = os.environ.get("VMSCHED_REDIS_URL", LOCAL_REDIS)
    base_db = os.environ.get("VMSCHED_DATABASE_URL", LOCAL_DATABASE)
    vhost = f"vmsched-test-{run_id}"
    database = f"vmsched_test_{run_id}"
    prefix = f"vmsched-test-{run_id}"

    broker = BrokerAccounts.of({"VMSCHED_AMQP_URL": base_amqp})
    broker.add_vhost(vhost, urlsplit(base_amqp).username or "guest")
    parts = urlsplit(base_amqp)
    amqp = urlunsplit((parts.scheme, parts.netloc, "/" + quote(vhost, safe=""), "", ""))
    db_parts = urlsplit(base_db)
    database_url = urlunsplit((db_parts.scheme, db_parts.netloc, "/" + database, "", ""))
    try:
        yield Servers(amqp, base_redis, database_url, prefix, run_id)
    finally:
        with contextlib.suppress(Exception):
            broker.delete_vhost(vhost)
        with contextlib.suppress(Exception):
            broker.delete_agent_users(vhost)
        with contextlib.suppress(Exception):
            drop_database(base_db, database)
        with contextlib.suppress(Exception):
            client = redis.Redis.from_url(base_redis)
            for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                client.delete(key)


def drop_database(base_db: str, database: str) -> None:
    """Drop ``database`` on the server of ``base_db`` (the connections it still has are cut)."""
    _on_the_server(base_db, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def copy_database(base_db: str, template: str, database: str) -> None:
    """Create ``database`` on the server of ``base_db`` as a copy of ``template`` (nobody may be on it)."""
    _on_the_server(base_db, f'CREATE DATABASE "{database}" TEMPLATE "{template}"')


def _on_the_server(base_db: str, statement: str) -> None:
    import asyncio

    parts = urlsplit(base_db.replace("postgresql+asyncpg://", "postgresql://", 1))

    async def run() -> None:
        conn = await asyncpg.connect(
            host=parts.hostname,
            port=parts.port or 5432,
            user=parts.username or "postgres",
            password=parts.password,
            database="postgres",
        )
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())
