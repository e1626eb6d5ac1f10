"""dedicated hosts: hosts.dedicated_to (the project a host takes VMs of, set by the operator; NULL: any
project's) and vms.dedicated (the VM goes only to its project's dedicated hosts); placement rule
``dedicated``

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("dedicated_to", sa.String(63), nullable=True))
    op.add_column("vms", sa.Column("dedicated", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    op.drop_column("vms", "dedicated")
    op.drop_column("hosts", "dedicated_to")
