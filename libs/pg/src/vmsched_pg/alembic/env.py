"""Alembic environment: runs on the connection :func:`vmsched_pg.schema_upgrade.upgrade_schema` hands it."""

from __future__ import annotations

from alembic import context

from vmsched_pg.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through vmsched_pg.schema_upgrade.upgrade_schema")

context.configure(connection=connection, target_metadata=Base.metadata, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
