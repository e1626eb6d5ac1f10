"""Bring the schema to the newest Alembic revision, safely when several services start at once."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text

from vmsched_pg.engine import create_engine, ensure_database
from vmsched_runtime.settings import load_settings

# The Alembic scripts: env.py and one file per revision in versions/.
ALEMBIC_SCRIPTS = Path(__file__).resolve().parent / "alembic"
# Arbitrary constant: the advisory lock every upgrading process queues on.
UPGRADE_LOCK_ID = 0x766D73636864


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(ALEMBIC_SCRIPTS))
    return config


def _upgrade(connection: Connection) -> None:
    # Serialises concurrent starters: the second one finds the schema current and does nothing.
    connection.execute(text("SELECT pg_advisory_lock(:id)"), {"id": UPGRADE_LOCK_ID})
    try:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        connection.commit()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": UPGRADE_LOCK_ID})
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


def main(argv: list[str] | None = None) -> None:
    """``python -m vmsched_pg.schema_upgrade``: upgrade the schema DATABASE_URL names, then exit.

    The Kubernetes Job and the compose one-shot service run this before the API rolls out."""
    argparse.ArgumentParser(
        prog="python -m vmsched_pg.schema_upgrade",
        description="Create the database if needed and apply every Alembic migration not yet applied "
        "(idempotent; concurrent runs queue on an advisory lock). The database comes from DATABASE_URL.",
    ).parse_args(argv)
    settings = load_settings("vmsched-migrate")
    asyncio.run(upgrade_schema(settings.sqlalchemy_url))
    print("vmsched-migrate: the schema is at the newest revision", flush=True)


if __name__ == "__main__":
    main()
