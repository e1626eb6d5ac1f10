"""vms, hosts and scheduler_settings

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "vms",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("hypervisor_id", sa.String(128), nullable=True),
        sa.Column("cpu", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.BigInteger(), nullable=False),
        sa.Column("disk_gb", sa.BigInteger(), nullable=False),
        sa.Column("gpu", sa.Integer(), server_default="0", nullable=False),
        sa.Column("labels", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("strategy", sa.String(32), nullable=True),
        sa.Column("restart_policy", sa.String(16), server_default="never", nullable=False),
        sa.Column("restart_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("attempt", sa.Integer(), server_default="1", nullable=False),
        sa.Column("exclude_hosts", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False),
        sa.Column("attempts", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False),
        sa.Column("placement", postgresql.JSONB(), nullable=True),
        sa.Column("idempotency_key", sa.String(255), nullable=True, unique=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_vms_created_id", "vms", ["created_at", "id"])
    op.create_index("ix_vms_status_created", "vms", ["status", "created_at", "id"])
    op.create_index("ix_vms_hypervisor", "vms", ["hypervisor_id", "status"])
    op.create_index(
        "ix_vms_unpublished",
        "vms",
        ["updated_at"],
        postgresql_where=sa.text("published_at IS NULL AND status IN ('pending', 'deleting')"),
    )
    op.create_table(
        "hosts",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("labels", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("cpu", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.BigInteger(), nullable=False),
        sa.Column("disk_gb", sa.BigInteger(), nullable=False),
        sa.Column("gpu", sa.Integer(), server_default="0", nullable=False),
        sa.Column("cpu_ratio", sa.Float(), server_default="1.0", nullable=False),
        sa.Column("memory_ratio", sa.Float(), server_default="1.0", nullable=False),
        sa.Column("alloc_cpu", sa.Integer(), server_default="0", nullable=False),
        sa.Column("alloc_memory_mb", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("alloc_disk_gb", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("alloc_gpu", sa.Integer(), server_default="0", nullable=False),
        sa.Column("vm_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("scheduling_paused", sa.Boolean(), server_default="false", nullable=False),
        sa.Column("last_heartbeat", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "scheduler_settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(255), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("scheduler_settings")
    op.drop_table("hosts")
    op.drop_table("vms")
