"""reservation_slots.placement: the decision record of each slot (with its decision journal entry), so
that a VM taking the slot records the decision that chose its host and its replay finds the entry

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null for the slots placed before it: a VM taking one records the reservation alone, as before.
    op.add_column("reservation_slots", sa.Column("placement", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("reservation_slots", "placement")
