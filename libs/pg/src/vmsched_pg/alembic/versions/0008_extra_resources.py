"""named extra resources: vms.extra (what a VM asks for), hosts.extra (what the agent reports) and
hosts.alloc_extra (what its VMs hold), each a JSONB {name: count}

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_EMPTY = sa.text("'{}'::jsonb")


def upgrade() -> None:
    op.add_column("vms", sa.Column("extra", postgresql.JSONB(), server_default=_EMPTY, nullable=False))
    op.add_column("hosts", sa.Column("extra", postgresql.JSONB(), server_default=_EMPTY, nullable=False))
    op.add_column("hosts", sa.Column("alloc_extra", postgresql.JSONB(), server_default=_EMPTY, nullable=False))


def downgrade() -> None:
    op.drop_column("hosts", "alloc_extra")
    op.drop_column("hosts", "extra")
    op.drop_column("vms", "extra")
