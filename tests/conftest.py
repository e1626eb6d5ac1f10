from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers import Servers, provide_servers
from vmsched_common.db.migrate import upgrade_schema
from vmsched_common.settings import Settings


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
