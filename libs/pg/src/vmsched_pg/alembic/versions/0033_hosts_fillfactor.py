"""hosts: fillfactor 50, so that a heartbeat's update of its host's row stays on the row's page (a HOT
update, the old version freed without VACUUM): with full pages the table grew between autovacuums
under a thousand hosts' heartbeats (the soak). Pages already written keep their fill until the next
rewrite (VACUUM FULL); new ones are filled to half.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE hosts SET (fillfactor = 50)")


def downgrade() -> None:
    op.execute("ALTER TABLE hosts RESET (fillfactor)")
