"""hosts: vacuumed after 100 dead row versions, whatever the table's size. Its heartbeat updates are
HOT and pruned on their page as they go: through a 10-minute soak at 50 VMs a second its dead
versions stayed between 50 and 200, under autovacuum's default threshold for 1,000 rows (50 + 20%:
250), so autovacuum would seldom visit it, and neither its free space map nor the line pointers
pruning leaves behind would be tended. A VACUUM of a thousand rows takes milliseconds.

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
