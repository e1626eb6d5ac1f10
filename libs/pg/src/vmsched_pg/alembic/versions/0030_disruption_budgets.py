"""server_groups.max_unavailable: a server group's disruption budget (Kubernetes' PodDisruptionBudget):
drains, rebalance plans and preemption take a member only while fewer are unavailable (NULL: no budget)

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("server_groups", sa.Column("max_unavailable", sa.Integer(), nullable=True))
    op.create_check_constraint(
        "ck_server_groups_max_unavailable", "server_groups", "max_unavailable IS NULL OR max_unavailable >= 0"
    )


def downgrade() -> None:
    op.drop_constraint("ck_server_groups_max_unavailable", "server_groups")
    op.drop_column("server_groups", "max_unavailable")
