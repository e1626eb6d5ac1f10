"""vms: exclusions that expire, failures counted apart from restarts, started_at; status unknown

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "vms", sa.Column("exclusions", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False)
    )
    # The hosts a VM had excluded so far stay excluded for a while from now.
    op.execute(
        """
        UPDATE vms SET exclusions = (
            SELECT coalesce(jsonb_object_agg(host, to_jsonb(extract(epoch FROM now()) + 600)), '{}'::jsonb)
              FROM jsonb_array_elements_text(exclude_hosts) AS host)
         WHERE exclude_hosts <> '[]'::jsonb
        """
    )
    op.drop_column("vms", "exclude_hosts")
    op.add_column("vms", sa.Column("failures", sa.Integer(), server_default="0", nullable=False))
    op.add_column("vms", sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE vms SET started_at = scheduled_at WHERE status IN ('running', 'deleting')")


def downgrade() -> None:
    op.drop_column("vms", "started_at")
    op.drop_column("vms", "failures")
    op.add_column(
        "vms", sa.Column("exclude_hosts", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False)
    )
    op.execute(
        "UPDATE vms SET exclude_hosts = "
        "(SELECT coalesce(jsonb_agg(k), '[]'::jsonb) FROM jsonb_object_keys(exclusions) k)"
    )
    op.drop_column("vms", "exclusions")
