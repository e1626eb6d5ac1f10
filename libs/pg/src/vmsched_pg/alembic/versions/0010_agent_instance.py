"""hosts: agent_instance (the agent process that holds the host id; another one is refused while it
is online)

Revision ID: 0010
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("agent_instance", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("hosts", "agent_instance")
