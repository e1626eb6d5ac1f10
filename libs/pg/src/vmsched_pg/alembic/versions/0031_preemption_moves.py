"""vms.preemption: the preemption that moved VMs off a host to make room for this VM (its journal
entry, the host, the victims), kept with the preemptor: the VM is placed later by a decision of its
own, whose record replaces the preemption's, and a replay must still name the victims and where
they went (issue 27)

Revision ID: 0031
Revises: 0025
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0031"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("vms", sa.Column("preemption", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("vms", "preemption")
