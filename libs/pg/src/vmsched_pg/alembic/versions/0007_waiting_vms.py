"""vms: wait_s and wait_until (a VM that fits nowhere may wait for room); the waiting VMs' indexes;
gang_id (the VMs of an all-or-nothing batch)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("vms", sa.Column("wait_s", sa.Integer(), server_default="0", nullable=False))
    op.add_column("vms", sa.Column("wait_until", sa.DateTime(timezone=True), nullable=True))
    op.add_column("vms", sa.Column("gang_id", postgresql.UUID(as_uuid=True), nullable=True))
    op.create_index("ix_vms_gang", "vms", ["gang_id"], postgresql_where=sa.text("gang_id IS NOT NULL"))
    # The waker reads what entered "waiting" lately, and ends what waited too long: both touch only
    # the waiting VMs, however many others there are.
    op.create_index("ix_vms_waiting_updated", "vms", ["updated_at"], postgresql_where=sa.text("status = 'waiting'"))
    op.create_index("ix_vms_waiting_until", "vms", ["wait_until"], postgresql_where=sa.text("status = 'waiting'"))


def downgrade() -> None:
    op.execute("UPDATE vms SET status = 'unschedulable' WHERE status = 'waiting'")
    op.drop_index("ix_vms_waiting_until", table_name="vms")
    op.drop_index("ix_vms_waiting_updated", table_name="vms")
    op.drop_index("ix_vms_gang", table_name="vms")
    op.drop_column("vms", "gang_id")
    op.drop_column("vms", "wait_until")
    op.drop_column("vms", "wait_s")
