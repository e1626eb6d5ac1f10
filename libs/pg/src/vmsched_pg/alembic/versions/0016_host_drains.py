"""host_drains: a host being emptied for maintenance (POST /v1/hosts/{id}/drain): its settings, its
state (draining, drained, timed_out), the migrations it started and the VMs it could not move

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_drains",
        sa.Column("host_id", sa.String(128), sa.ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("evacuate", sa.Boolean(), nullable=False),
        sa.Column("max_parallel", sa.Integer(), nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("failures", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("host_drains")
