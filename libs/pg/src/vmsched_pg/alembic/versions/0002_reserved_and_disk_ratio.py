"""hosts: capacity reserved for the hypervisor, and a disk allocation ratio (the fit rule's inputs)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("disk_ratio", sa.Float(), server_default="1.0", nullable=False))
    op.add_column("hosts", sa.Column("reserved_cpu", sa.Integer(), server_default="0", nullable=False))
    op.add_column("hosts", sa.Column("reserved_memory_mb", sa.BigInteger(), server_default="0", nullable=False))
    op.add_column("hosts", sa.Column("reserved_disk_gb", sa.BigInteger(), server_default="0", nullable=False))
    op.add_column("hosts", sa.Column("reserved_gpu", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    for column in ("reserved_gpu", "reserved_disk_gb", "reserved_memory_mb", "reserved_cpu", "disk_ratio"):
        op.drop_column("hosts", column)
