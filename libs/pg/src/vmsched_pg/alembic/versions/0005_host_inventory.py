"""hosts: the operator owns the inventory. What the agent reports (agent_*) and what the operator set
(operator_*, PATCH /v1/hosts/{id}) are kept apart; the columns every reader uses (labels, taints, the
ratios) hold the effective value: the agent's, overlaid by the operator's.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_RATIOS = ("cpu_ratio", "memory_ratio", "disk_ratio")


def _jsonb(name: str, default: str | None) -> sa.Column[object]:
    if default is None:
        return sa.Column(name, postgresql.JSONB(), nullable=True)
    return sa.Column(name, postgresql.JSONB(), server_default=sa.text(f"'{default}'::jsonb"), nullable=False)


def upgrade() -> None:
    op.add_column("hosts", _jsonb("agent_labels", "{}"))
    op.add_column("hosts", _jsonb("operator_labels", "{}"))
    op.add_column("hosts", _jsonb("taints", "[]"))
    op.add_column("hosts", _jsonb("agent_taints", "[]"))
    op.add_column("hosts", _jsonb("operator_taints", None))
    for ratio in _RATIOS:
        op.add_column("hosts", sa.Column(f"agent_{ratio}", sa.Float(), server_default="1.0", nullable=False))
        op.add_column("hosts", sa.Column(f"operator_{ratio}", sa.Float(), nullable=True))
    # Until now every label and ratio was the agent's.
    op.execute("UPDATE hosts SET agent_labels = labels, " + ", ".join(f"agent_{ratio} = {ratio}" for ratio in _RATIOS))
    op.add_column("vms", _jsonb("tolerations", "[]"))


def downgrade() -> None:
    op.drop_column("vms", "tolerations")
    # The effective values stay in labels and the ratios; what only the operator said is forgotten.
    for ratio in reversed(_RATIOS):
        op.drop_column("hosts", f"operator_{ratio}")
        op.drop_column("hosts", f"agent_{ratio}")
    for column in ("operator_taints", "agent_taints", "taints", "operator_labels", "agent_labels"):
        op.drop_column("hosts", column)
