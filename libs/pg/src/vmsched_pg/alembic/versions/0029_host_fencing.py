"""hosts.fenced_at, fenced_by, fence_tried_at, fence_error: a host declared down (by an operator, or
by VMSCHED_FENCE_COMMAND once it was lost) takes no VM until it is unfenced (docs/operations.md#fencing)

Revision ID: 0029
Revises: 0023
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("fenced_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("hosts", sa.Column("fenced_by", sa.String(16), nullable=True))
    op.add_column("hosts", sa.Column("fence_tried_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("hosts", sa.Column("fence_error", sa.Text(), nullable=True))


def downgrade() -> None:
    for column in ("fence_error", "fence_tried_at", "fenced_by", "fenced_at"):
        op.drop_column("hosts", column)
