"""Fixtures every test may use, and the hook that marks the ones on the real servers.

A test is ``integration`` because of what it uses, not because it says so: any test whose fixtures
(directly or through other fixtures) include one that gives real servers is marked at collection, so
``-m "not integration"`` (make test-fast) runs every other test of the tree and never one that needs
the servers. A fixture gives real servers when it is named ``servers`` (the run's, below) or ends in
``_servers`` (a module's servers of its own, from :func:`tests.servers.provide_servers`).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.servers import Servers, copy_database, drop_database, provide_servers
from vmsched_pg.engine import create_engine
from vmsched_pg.schema_upgrade import upgrade_schema
from vmsched_runtime.settings import Settings


def gives_servers(fixture_name: str) -> bool:
    return fixture_name == "servers" or fixture_name.endswith("_servers")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(gives_servers(name) for name in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    """Real RabbitMQ, Redis and PostgreSQL, isolated for this run (see tests/servers.py)."""
    with provide_servers() as provided:
        yield provided


@pytest.fixture(scope="session")
async def migrated(servers: Servers) -> Servers:
    await upgrade_schema(servers.database_url)
    return servers


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return Settings.from_environment(servers.env())


@pytest.fixture(scope="session")
async def schema_template(servers: Servers) -> AsyncIterator[str]:
    """The name of a database migrated once, that each private database is a copy of: copying takes
    a tenth of a second, creating and migrating a fresh one about a second (some thirty tests, and the fuzzed API).
    Nothing connects to it after its migration (PostgreSQL copies only a database nobody is on)."""
    url = make_url(servers.database_url)
    template = url.set(database=f"{url.database}_template")
    await upgrade_schema(template.render_as_string(hide_password=False))
    try:
        yield str(template.database)
    finally:
        await asyncio.to_thread(drop_database, servers.database_url, str(template.database))


@pytest.fixture
async def private_engine(
    servers: Servers, schema_template: str, request: pytest.FixtureRequest
) -> AsyncIterator[AsyncEngine]:
    """A migrated database of this test's own, for code that works on every row (no running stack
    touches the same rows at the same moment), dropped afterwards."""
    url = make_url(servers.database_url)
    own = re.sub(r"\W+", "_", request.node.name[:24].lower())
    private = url.set(database=f"{url.database}_{own}_{uuid.uuid4().hex[:6]}")
    await asyncio.to_thread(copy_database, servers.database_url, schema_template, str(private.database))
    engine = create_engine(private.render_as_string(hide_password=False), pool_size=2)
    try:
        yield engine
    finally:
        await engine.dispose()
        await asyncio.to_thread(drop_database, servers.database_url, str(private.database))
