"""vms.host_selector: the terms a VM's host must satisfy (In, NotIn, Exists, DoesNotExist)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "vms", sa.Column("host_selector", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False)
    )


def downgrade() -> None:
    op.drop_column("vms", "host_selector")
