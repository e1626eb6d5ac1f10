"""decision_journal: the exact inputs of every placement decision, per scheduler replica, as a chain
of checkpoints and deltas (vmsched_placement.journal); GET /v1/vms/{id}/placement/replay rebuilds one

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "decision_journal",
        sa.Column("replica", sa.String(32), primary_key=True),
        sa.Column("seq", sa.BigInteger(), primary_key=True),
        sa.Column("checkpoint", sa.Boolean(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    # A replay reads from the decision's checkpoint: the last one at or before it.
    op.create_index(
        "decision_journal_checkpoints",
        "decision_journal",
        ["replica", "seq"],
        postgresql_where=sa.text("checkpoint"),
    )


def downgrade() -> None:
    op.drop_table("decision_journal")
