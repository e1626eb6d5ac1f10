"""A running vmsched (API, gateway, one scheduler as real processes) on this run's servers."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.stack import Stack
from tests.servers import Servers
from vmsched_common.db.engine import create_engine, ensure_database
from vmsched_common.db.migrate import upgrade_schema

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stack_env(servers: Servers, **overrides: str) -> dict[str, str]:
    return servers.env(
        VMSCHED_AGENT_OFFLINE_TIMEOUT="15",
        VMSCHED_RECONCILE_INTERVAL="5",
        VMSCHED_REPUBLISH_AFTER="2",
        VMSCHED_LOG_LEVEL="INFO",
        **overrides,
    )


@pytest.fixture(scope="session")
def stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    log_dir = Path(tmp_path_factory.mktemp("stack-logs"))
    running = Stack(env=stack_env(servers), log_dir=log_dir, api_port=free_port())
    with running.running(schedulers=1):
        yield running


@pytest.fixture(scope="session")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.api_url, timeout=30) as client:
        yield client


@pytest.fixture
async def private_engine(servers: Servers, request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    """A migrated database of this test's own, for code that works on every row (no running stack
    touches the same rows at the same moment), dropped afterwards."""
    url = make_url(servers.database_url)
    private = url.set(database=f"{url.database}_{request.node.name[:20].lower()}")
    dsn = private.render_as_string(hide_password=False)
    await ensure_database(dsn)
    await upgrade_schema(dsn)
    engine = create_engine(dsn, pool_size=2)
    try:
        yield engine
    finally:
        await engine.dispose()
        admin = await asyncpg.connect(
            host=url.host, port=url.port or 5432, user=url.username, password=url.password, database="postgres"
        )
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{private.database}" WITH (FORCE)')
        finally:
            await admin.close()
