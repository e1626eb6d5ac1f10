"""Storage pools (issue 26): shared pools (the operator's capacity and tags), the pools a host's
heartbeat lists, a VM's volumes and, once placed, each volume's pool (vm_volumes, summed per pool
by PostgreSQL's guard).

Revision ID: 0025
Revises: 0030
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0025"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("storage_pools", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")))
    op.add_column("vms", sa.Column("volumes", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")))
    op.create_table(
        "storage_pools",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("capacity_gb", sa.BigInteger, nullable=False),
        sa.Column("tags", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "vm_volumes",
        sa.Column("vm_id", UUID(as_uuid=True), sa.ForeignKey("vms.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("pool", sa.String(128), primary_key=True),
        sa.Column("shared", sa.Boolean, nullable=False),
        sa.Column("size_gb", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_vm_volumes_pool", "vm_volumes", ["pool"])


def downgrade() -> None:
    op.drop_index("ix_vm_volumes_pool", "vm_volumes")
    op.drop_table("vm_volumes")
    op.drop_table("storage_pools")
    op.drop_column("vms", "volumes")
    op.drop_column("hosts", "storage_pools")
