"""hosts: vacuumed after 100 dead row versions, whatever the table's size. Its heartbeat updates are
HOT and pruned on their page as they go, so dead versions never pile up to autovacuum's default
threshold (50 + 20% of 1,000 rows): in a 10-minute soak at 50 VMs a second it never ran (about 100
dead at any time), so neither the free space map nor the line pointers pruning leaves behind were
ever tended, and in the hour the table grew by 9% over the second half (most of it while a host
was drained). A VACUUM of a thousand rows takes milliseconds.

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE hosts SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100)")


def downgrade() -> None:
    op.execute("ALTER TABLE hosts RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold)")
