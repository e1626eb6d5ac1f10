"""hosts.fence_attempts, fence_retry_at: a fence command that failed is run again, with a backoff,
while the host stays silent (docs/operations.md#fencing). Kept with the host, not in the gateway's
memory: a gateway that restarts between two tries (or another replica) takes the next one on time.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("fence_attempts", sa.Integer(), nullable=False, server_default=sa.text("0")))
    op.add_column("hosts", sa.Column("fence_retry_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("hosts", "fence_retry_at")
    op.drop_column("hosts", "fence_attempts")
