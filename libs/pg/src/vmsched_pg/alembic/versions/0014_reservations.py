"""reservations: capacity held for a project (reservations, and one slot per held VM's room on a
host) and vms.reservation, the reservation a VM consumes

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("cpu", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.BigInteger(), nullable=False),
        sa.Column("disk_gb", sa.BigInteger(), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("count", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("host_selector", postgresql.JSONB(), nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("placement", postgresql.JSONB(), nullable=True),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_reservations_project_created", "reservations", ["project", "created_at", "id"])
    op.create_index(
        "ix_reservations_open",
        "reservations",
        ["updated_at"],
        postgresql_where=sa.text("status IN ('pending', 'held', 'unschedulable')"),
    )
    op.create_table(
        "reservation_slots",
        sa.Column("id", postgresql.UUID(as_uuid=True), primary_key=True),
        sa.Column(
            "reservation_id",
            postgresql.UUID(as_uuid=True),
            sa.ForeignKey("reservations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("hypervisor_id", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("cpu", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.BigInteger(), nullable=False),
        sa.Column("disk_gb", sa.BigInteger(), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("vm_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_reservation_slots_reservation", "reservation_slots", ["reservation_id", "status"])
    op.create_index(
        "ix_reservation_slots_held",
        "reservation_slots",
        ["hypervisor_id"],
        postgresql_where=sa.text("status = 'held'"),
    )
    op.add_column("vms", sa.Column("reservation", postgresql.UUID(as_uuid=True), nullable=True))


def downgrade() -> None:
    # Held room goes back to its hosts; the periodic reconcile drops the claims from Redis.
    op.execute(
        """
        UPDATE hosts h SET alloc_cpu = h.alloc_cpu - s.cpu, alloc_memory_mb = h.alloc_memory_mb - s.memory_mb,
                           alloc_disk_gb = h.alloc_disk_gb - s.disk_gb, alloc_gpu = h.alloc_gpu - s.gpu,
                           vm_count = h.vm_count - s.n
          FROM (SELECT hypervisor_id, sum(cpu) AS cpu, sum(memory_mb) AS memory_mb, sum(disk_gb) AS disk_gb,
                       sum(gpu) AS gpu, count(*) AS n
                  FROM reservation_slots WHERE status = 'held' GROUP BY hypervisor_id) s
         WHERE h.id = s.hypervisor_id
        """
    )
    op.drop_column("vms", "reservation")
    op.drop_index("ix_reservation_slots_held", table_name="reservation_slots")
    op.drop_index("ix_reservation_slots_reservation", table_name="reservation_slots")
    op.drop_table("reservation_slots")
    op.drop_index("ix_reservations_open", table_name="reservations")
    op.drop_index("ix_reservations_project_created", table_name="reservations")
    op.drop_table("reservations")
