"""Connections to PostgreSQL: the async engine every service uses, and how a service checks at start
that the server answers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from tenacity import retry, retry_if_exception, stop_after_attempt

from vmsched_runtime.reachability import CONNECT_TIMEOUT, Server
from vmsched_runtime.readiness import Check
from vmsched_runtime.settings import SSL_MODES, Settings


def tls_of(url: URL) -> tuple[URL, dict[str, Any]]:
    """``url`` without its TLS mode, and asyncpg's keyword for it. A database URL names the mode as
    libpq does (``?sslmode=require``, or asyncpg's ``?ssl=require``); SQLAlchemy would hand
    ``sslmode`` to asyncpg as a keyword it does not take. Certificates come from the standard
    ``PGSSLROOTCERT``, ``PGSSLCERT`` and ``PGSSLKEY`` variables, which asyncpg reads."""
    mode = url.query.get("sslmode") or url.query.get("ssl")
    if mode is None:
        return url, {}
    if not isinstance(mode, str) or mode not in SSL_MODES:
        raise ValueError(f"unknown sslmode {mode!r}; valid: {', '.join(SSL_MODES)}")
    return url.difference_update_query(["sslmode", "ssl"]), {"ssl": mode}


async def connect_directly(
    database_url: str, *, database: str | None = None, timeout: float = 60
) -> asyncpg.Connection:
    """One asyncpg connection outside any pool (to create the database, to LISTEN), with the URL's
    credentials and TLS mode; ``database`` instead of the URL's, if given."""
    url, tls = tls_of(make_url(database_url))
    return await asyncpg.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        user=url.username or "postgres",
        password=url.password,
        database=database or url.database or "postgres",
        timeout=timeout,
        **tls,
    )


# Seconds a statement may wait for PostgreSQL's answer on the client's side (statement_timeout is 10).
COMMAND_TIMEOUT = 15.0


def create_engine(database_url: str, *, pool_size: int = 10) -> AsyncEngine:
    """The pool does not ping a connection before handing it out: SQLAlchemy's asyncpg ping is a
    BEGIN, a ``;`` and a ROLLBACK, a seventh of the API's CPU at 100 single POSTs/s. A connection a
    PostgreSQL restart left dead fails its first statement instead, and SQLAlchemy then discards
    the whole pool: the consumers retry the message (``amqp.is_transient``), the API its unit of
    work once (:func:`retry_on_dead_connection`)."""
    url, tls = tls_of(make_url(database_url))
    return create_async_engine(
        url,
        pool_size=pool_size,
        # No overflow: a connection beyond the pool is opened for one burst and closed when returned,
        # and under steady load that churn (a PostgreSQL backend forked per request) cost the API a
        # tenth of its CPU. Callers wait for a pooled connection instead.
        max_overflow=0,
        pool_pre_ping=False,
        connect_args={
            **tls,
            # Bounded on the client's side too: a server that went silent (a partition: the socket open,
            # nothing answering) fails a statement after this, as statement_timeout fails one that runs
            # too long (which it outlasts, so that the server's own error comes first when it can), and
            # a connection that does not open fails after CONNECT_TIMEOUT; the caller then retries or
            # answers 503, rather than waiting as long as the partition lasts.
            "command_timeout": COMMAND_TIMEOUT,
            "timeout": CONNECT_TIMEOUT,
            "server_settings": {
                # Bounded statements: a stuck lock must surface as an error, not as a hung consumer.
                "statement_timeout": "10000",
                "application_name": "vmsched",
                # Plan every execution for what it names and the table as it is now. The driver
                # prepares each statement once per connection, and PostgreSQL would settle on a
                # generic plan costed for the table at that moment: a service that starts on a young
                # table kept sequential scans of ``vms`` until an ANALYZE, which autovacuum may run
                # late or never (measured: 30-70 ms a statement at 17,000 VMs, and POST->scheduled
                # going from under a second to several). Planning these statements costs 0.1-0.6 ms.
                "plan_cache_mode": "force_custom_plan",
            },
        },
    )


def failed_on_dead_connection(error: BaseException) -> bool:
    """A statement failed because its pooled connection was dead (PostgreSQL restarted, or closed
    it). Nothing of that transaction was committed: the server rolls back what a lost connection
    began, and a failed COMMIT (whose outcome is unknown) carries no statement, so is not this."""
    return isinstance(error, DBAPIError) and error.connection_invalidated and error.statement is not None


# Once more on a fresh connection (the pool was discarded with the dead one), then the error.
retry_on_dead_connection = retry(
    retry=retry_if_exception(failed_on_dead_connection), stop=stop_after_attempt(2), reraise=True
)


def database_check(engine: AsyncEngine) -> Check:
    """PostgreSQL's part of a service's readiness (:mod:`vmsched_runtime.readiness`): a pooled
    connection answers ``SELECT 1`` (once more on a fresh one if the pooled one was dead)."""

    @retry_on_dead_connection
    async def check() -> None:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    return check


@contextlib.asynccontextmanager
async def lone_statement(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A pooled connection for one statement, which commits by itself. A statement is atomic on its
    own, and ``engine.begin()`` would wrap it in a BEGIN and a COMMIT: two more round trips, which
    for the API's small batched writes (audit rows, published marks) were as costly as the statement.
    Only for a single statement: two in a row would each commit alone."""
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        yield connection


async def ensure_database(database_url: str) -> None:
    """Create the database named in the URL if the server does not have it yet (fresh machines)."""
    url = make_url(database_url)
    name = url.database
    if not name:
        return
    admin = await connect_directly(database_url, database="postgres")
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            # Another service may create it at the same moment.
            with contextlib.suppress(asyncpg.DuplicateDatabaseError, asyncpg.UniqueViolationError):
                await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


def _database_url(settings: Settings) -> str:
    return settings.sqlalchemy_url


def _start_the_api_first(error: BaseException) -> str:
    return " (vmsched-api creates and migrates it: start the API first)" if "does not exist" in str(error) else ""


async def _reach_database(settings: Settings) -> None:
    database = await connect_directly(settings.sqlalchemy_url, timeout=CONNECT_TIMEOUT)
    await database.close()


async def _reach_server(settings: Settings) -> None:
    database = await connect_directly(settings.sqlalchemy_url, database="postgres", timeout=CONNECT_TIMEOUT)
    await database.close()


# As a service's command line checks them before starting (vmsched_runtime.reachability): the
# database VMSCHED_DATABASE_URL names, or only its server (for the API, which creates the database).
DATABASE = Server("PostgreSQL", "DATABASE_URL", url=_database_url, reach=_reach_database, hint=_start_the_api_first)
DATABASE_SERVER = Server(
    "PostgreSQL", "DATABASE_URL", url=_database_url, reach=_reach_server, hint=_start_the_api_first
)
