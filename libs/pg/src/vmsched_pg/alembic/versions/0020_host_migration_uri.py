"""hosts.migration_uri: where other hosts' hypervisors reach this one's for a live migration (the
libvirt agent's heartbeats announce it; the gateway hands it to a migration's source)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null for every host whose agent names none (the simulator, agents older than the field).
    op.add_column("hosts", sa.Column("migration_uri", sa.String(1024), nullable=True))


def downgrade() -> None:
    op.drop_column("hosts", "migration_uri")
