"""PostgreSQL's sslmode reaches the server: the local test server speaks no TLS, so ``disable``
and ``prefer`` connect and ``require`` is refused for want of TLS (a mode that were dropped on the
way would connect)."""

from __future__ import annotations

import pytest

from tests.servers import Servers
from vmsched_pg.engine import connect_directly, create_engine


async def server_speaks_tls(servers: Servers) -> bool:
    connection = await connect_directly(servers.database_url)
    try:
        return bool(await connection.fetchval("SHOW ssl") == "on")
    finally:
        await connection.close()


async def test_the_sslmode_of_the_database_url_is_the_one_used(migrated: Servers) -> None:
    if await server_speaks_tls(migrated):
        pytest.fail("this test expects a PostgreSQL without TLS (the local test server)")
    for mode in ("disable", "prefer"):
        connection = await connect_directly(f"{migrated.database_url}?sslmode={mode}")
        await connection.close()
        engine = create_engine(f"{migrated.database_url}?sslmode={mode}", pool_size=1)
        async with engine.connect() as pooled:
            await pooled.exec_driver_sql("SELECT 1")
        await engine.dispose()
    with pytest.raises(Exception, match=r"(?i)ssl"):
        await connect_directly(f"{migrated.database_url}?sslmode=require")
