"""identity: projects (with their quotas), API tokens (hashes only), the audit trail; vms.project and
server_groups.project (every existing VM and group belongs to the project "default")

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

DEFAULT_PROJECT = "default"


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("name", sa.String(63), primary_key=True),
        # NULL: no limit on that resource.
        sa.Column("quota_instances", sa.Integer(), nullable=True),
        sa.Column("quota_cpu", sa.BigInteger(), nullable=True),
        sa.Column("quota_memory_mb", sa.BigInteger(), nullable=True),
        sa.Column("quota_disk_gb", sa.BigInteger(), nullable=True),
        sa.Column("quota_gpu", sa.BigInteger(), nullable=True),
        sa.Column("quota_max_priority", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.execute(f"INSERT INTO projects (name) VALUES ('{DEFAULT_PROJECT}')")
    op.create_table(
        "tokens",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), nullable=False),
        sa.Column("scopes", postgresql.ARRAY(sa.String(32)), nullable=False),
        # sha256 of the secret, hex; the secret itself is never stored.
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("token_id", sa.String(64), nullable=True),
        sa.Column("project", sa.String(63), nullable=True),
        sa.Column("action", sa.String(128), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
    )
    op.create_index("ix_audit_project", "audit", ["project", "id"])
    op.add_column("vms", sa.Column("project", sa.String(63), nullable=False, server_default=DEFAULT_PROJECT))
    op.create_index("ix_vms_project_created", "vms", ["project", "created_at", "id"])
    # An Idempotency-Key is the project's own: another project's request with the same key is
    # another request (and learns nothing of the first).
    op.drop_constraint("vms_idempotency_key_key", "vms", type_="unique")
    op.create_index("ux_vms_project_idempotency_key", "vms", ["project", "idempotency_key"], unique=True)
    op.add_column("server_groups", sa.Column("project", sa.String(63), nullable=False, server_default=DEFAULT_PROJECT))


def downgrade() -> None:
    op.drop_column("server_groups", "project")
    op.drop_index("ux_vms_project_idempotency_key", table_name="vms")
    op.create_unique_constraint("vms_idempotency_key_key", "vms", ["idempotency_key"])
    op.drop_index("ix_vms_project_created", table_name="vms")
    op.drop_column("vms", "project")
    op.drop_index("ix_audit_project", table_name="audit")
    op.drop_table("audit")
    op.drop_table("tokens")
    op.drop_table("projects")
