"""vms: priority (a VM that fits nowhere may preempt VMs of lower priority) and preempted_by; the
unpublished index covers preempted VMs (their delete command is implied by their status)

Revision ID: 0012
Revises: 0010
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("vms", sa.Column("priority", sa.Integer(), server_default="0", nullable=False))
    op.add_column("vms", sa.Column("preempted_by", postgresql.UUID(as_uuid=True), nullable=True))
    # A preemptor's create waits while it has victims to delete (the gateway asks per assignment).
    op.create_index("ix_vms_preempting", "vms", ["preempted_by"], postgresql_where=sa.text("status = 'preempted'"))
    op.drop_index("ix_vms_unpublished", table_name="vms")
    op.create_index(
        "ix_vms_unpublished",
        "vms",
        ["updated_at"],
        postgresql_where=sa.text("published_at IS NULL AND status IN ('pending', 'deleting', 'preempted')"),
    )


def downgrade() -> None:
    op.execute("UPDATE vms SET status = 'failed' WHERE status = 'preempted'")
    op.drop_index("ix_vms_unpublished", table_name="vms")
    op.create_index(
        "ix_vms_unpublished",
        "vms",
        ["updated_at"],
        postgresql_where=sa.text("published_at IS NULL AND status IN ('pending', 'deleting')"),
    )
    op.drop_index("ix_vms_preempting", table_name="vms")
    op.drop_column("vms", "preempted_by")
    op.drop_column("vms", "priority")
