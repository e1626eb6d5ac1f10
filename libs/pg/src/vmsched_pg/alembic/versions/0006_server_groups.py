"""server groups: the server_groups table, and vms.server_group

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "server_groups",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("policy", sa.String(32), nullable=False),
        sa.Column("topology_key", sa.String(63), nullable=False, server_default="host"),
        sa.Column("max_per_domain", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("max_skew", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    # A group may go only while none of its VMs is alive (the API checks under the group's row lock);
    # the deleted and failed VMs that still name it forget it.
    op.add_column(
        "vms",
        sa.Column(
            "server_group",
            postgresql.UUID(as_uuid=True),
            sa.ForeignKey("server_groups.id", ondelete="SET NULL"),
            nullable=True,
        ),
    )
    op.create_index(
        "ix_vms_server_group", "vms", ["server_group", "status"], postgresql_where=sa.text("server_group IS NOT NULL")
    )


def downgrade() -> None:
    op.drop_index("ix_vms_server_group", table_name="vms")
    op.drop_column("vms", "server_group")
    op.drop_table("server_groups")
