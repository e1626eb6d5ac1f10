"""vms.planner: which eligible hosts a VM's strategy ranks (flat, or cluster_first: the hosts of the
cluster with the most free capacity that fits), as asked or VMSCHED_PLANNER when it was accepted

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("vms", sa.Column("planner", sa.String(16), server_default="flat", nullable=False))


def downgrade() -> None:
    op.drop_column("vms", "planner")
