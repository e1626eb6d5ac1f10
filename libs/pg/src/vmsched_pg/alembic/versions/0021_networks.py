"""networks: hosts.networks (what its agent's heartbeats say it reaches) and vms.networks (what a VM
needs on its host; placement rule ``network``)

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def _networks() -> sa.Column[object]:
    return sa.Column("networks", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False)


def upgrade() -> None:
    # Every existing host reaches none until its next heartbeat names some; every existing VM needs none.
    op.add_column("hosts", _networks())
    op.add_column("vms", _networks())


def downgrade() -> None:
    op.drop_column("vms", "networks")
    op.drop_column("hosts", "networks")
