"""vms: task and task_since (what an agent was asked and has not answered: a stop, a start, a
migration's step), migrations (their count), target_host and migration_target (a migration's asked
and claimed target); hosts: capabilities (what the agent declares it can do: migrate, power)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("vms", sa.Column("task", sa.String(32), nullable=True))
    op.add_column("vms", sa.Column("task_since", sa.DateTime(timezone=True), nullable=True))
    op.add_column("vms", sa.Column("migrations", sa.Integer(), server_default="0", nullable=False))
    op.add_column("vms", sa.Column("target_host", sa.String(128), nullable=True))
    op.add_column("vms", sa.Column("migration_target", sa.String(128), nullable=True))
    # The gateway's sweeps read the VMs with a task (few), however many VMs there are; reconciliation
    # and a host's deletion find the VMs migrating to a host.
    op.create_index("ix_vms_task", "vms", ["updated_at"], postgresql_where=sa.text("task IS NOT NULL"))
    op.create_index(
        "ix_vms_migration_target",
        "vms",
        ["migration_target"],
        postgresql_where=sa.text("migration_target IS NOT NULL"),
    )
    op.add_column(
        "hosts",
        sa.Column("capabilities", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False),
    )


def downgrade() -> None:
    # A migration in flight is rolled back (its target's share given back); a stopped VM is taken
    # for running (the older schema knows no power states).
    op.execute(
        """
        UPDATE hosts h SET alloc_cpu = h.alloc_cpu - m.cpu, alloc_memory_mb = h.alloc_memory_mb - m.memory_mb,
                           alloc_disk_gb = h.alloc_disk_gb - m.disk_gb, alloc_gpu = h.alloc_gpu - m.gpu,
                           vm_count = h.vm_count - m.n
          FROM (SELECT migration_target AS host, sum(cpu) AS cpu, sum(memory_mb) AS memory_mb,
                       sum(disk_gb) AS disk_gb, sum(gpu) AS gpu, count(*) AS n
                  FROM vms WHERE migration_target IS NOT NULL GROUP BY 1) m
         WHERE h.id = m.host
        """
    )
    op.execute("UPDATE vms SET status = 'running' WHERE status IN ('migrating', 'stopped')")
    op.drop_column("hosts", "capabilities")
    op.drop_index("ix_vms_migration_target", table_name="vms")
    op.drop_index("ix_vms_task", table_name="vms")
    op.drop_column("vms", "migration_target")
    op.drop_column("vms", "target_host")
    op.drop_column("vms", "migrations")
    op.drop_column("vms", "task_since")
    op.drop_column("vms", "task")
