"""The schema: migrations apply on an empty database, twice and concurrently, and match the models."""

from __future__ import annotations

import asyncio

import asyncpg
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from tests.servers import Servers
from vmsched_pg.engine import create_engine
from vmsched_pg.models import Base
from vmsched_pg.schema_upgrade import alembic_config, upgrade_schema


async def test_concurrent_upgrades_leave_one_current_schema(migrated: Servers) -> None:
    await asyncio.gather(*(upgrade_schema(migrated.database_url) for _ in range(4)))
    conn = await asyncpg.connect(migrated.asyncpg_dsn)
    try:
        versions = await conn.fetch("SELECT version_num FROM alembic_version")
    finally:
        await conn.close()
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert [row["version_num"] for row in versions] == [head]


async def test_models_match_the_migrations(migrated: Servers) -> None:
    engine = create_engine(migrated.database_url, pool_size=1)

    def diff(connection: Connection) -> list[object]:
        return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))

    try:
        async with engine.connect() as connection:
            differences = await connection.run_sync(diff)
    finally:
        await engine.dispose()
    assert differences == []


async def test_the_hosts_table_leaves_room_on_each_page_and_is_vacuumed_often(migrated: Servers) -> None:
    """Each heartbeat updates its host's row: half of each page is left for the new versions (HOT
    updates), and the table is vacuumed after 100 dead versions whatever its size (migrations 0033 and
    0034; the soak's tables rule, docs/reliability.md)."""
    connection = await asyncpg.connect(migrated.asyncpg_dsn)
    try:
        options = await connection.fetchval("SELECT reloptions FROM pg_class WHERE relname = 'hosts'")
    finally:
        await connection.close()
    assert set(options) == {"fillfactor=50", "autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=100"}
