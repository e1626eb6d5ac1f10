"""Connections to PostgreSQL: the async engine and session factory every service uses."""

from __future__ import annotations

import contextlib

import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine


def create_engine(database_url: str, *, pool_size: int = 10, pre_ping: bool = True) -> AsyncEngine:
    """``pre_ping=False`` saves a round trip per transaction where a dead pooled connection is
    harmless: the consumers' handlers retry a transaction whose connection was invalidated
    (``amqp.is_transient``), so after a PostgreSQL restart one attempt fails and the next one
    reconnects. The API keeps pinging: an HTTP caller would see that failure."""
    return create_async_engine(
        database_url,
        pool_size=pool_size,
        # No overflow: a connection beyond the pool is opened for one burst and closed when returned,
        # and under steady load that churn (a PostgreSQL backend forked per request) cost the API a
        # tenth of its CPU. Callers wait for a pooled connection instead.
        max_overflow=0,
        pool_pre_ping=pre_ping,
        # Bounded statements: a stuck lock must surface as an error, not as a hung consumer.
        connect_args={"server_settings": {"statement_timeout": "10000", "application_name": "vmsched"}},
    )


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


async def ensure_database(database_url: str) -> None:
    """Create the database named in the URL if the server does not have it yet (fresh machines)."""
    url = make_url(database_url)
    name = url.database
    if not name:
        return
    admin = await asyncpg.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        user=url.username or "postgres",
        password=url.password,
        database="postgres",
    )
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            # Another service may create it at the same moment.
            with contextlib.suppress(asyncpg.DuplicateDatabaseError, asyncpg.UniqueViolationError):
                await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
