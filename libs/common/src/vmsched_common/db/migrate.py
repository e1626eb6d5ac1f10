"""Bring the schema to the newest Alembic revision, safely when several services start at once."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text

from vmsched_common.db.engine import create_engine, ensure_database

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
# Arbitrary constant: the advisory lock every migrating process queues on.
MIGRATION_LOCK_ID = 0x766D73636864


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _upgrade(connection: Connection) -> None:
    # Serialises concurrent starters: the second one finds the schema current and does nothing.
    connection.execute(text("SELECT pg_advisory_lock(:id)"), {"id": MIGRATION_LOCK_ID})
    try:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        connection.commit()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": MIGRATION_LOCK_ID})
        connection.commit()


async def upgrade_schema(database_url: str) -> None:
    """Create the database if needed and apply every migration not yet applied (idempotent)."""
    await ensure_database(database_url)
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_upgrade)
    finally:
        await engine.dispose()
