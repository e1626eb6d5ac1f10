"""The API's reads and writes of reservations in PostgreSQL (vmsched_domain.reservations).

A reservation is made ``pending`` in the transaction that checks its project's quota (it counts as
its ``count`` VMs from then on); a scheduler places it. DELETE ends it: its held slots give their
room back in the same transaction, and their Redis claims are released once it is committed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_api import quota
from vmsched_contract.api import VmDefaults, VmRequest
from vmsched_contract.messages import HostSelectorTerm, Resources
from vmsched_contract.status import ReservationStatus
from vmsched_domain.records import ReservationRecord
from vmsched_domain.reservations import OPEN
from vmsched_pg.engine import retry_on_dead_connection
from vmsched_pg.reservation_store import SELECT_RESERVATIONS, end_reservations
from vmsched_pg.rows import reservation_from_row


class UnknownReservation(Exception):
    """A VM named a reservation its project does not have."""

    def __init__(self, reservation_id: UUID, why: str = "") -> None:
        super().__init__(why or f"no reservation {reservation_id}")
        self.reservation_id = reservation_id
        self.type = "unknown_reservation" if not why else "reservation_unusable"


class UnknownProject(Exception):
    pass


_INSERT = text(
    """
    INSERT INTO reservations (id, project, status, cpu, memory_mb, disk_gb, gpu, count, host_selector, ends_at)
    VALUES (:id, :project, :status, :cpu, :memory_mb, :disk_gb, :gpu, :count, CAST(:host_selector AS jsonb), :ends_at)
    """
)
_PROJECT = text("SELECT name FROM projects WHERE name = :project FOR KEY SHARE")
_ONE = text(f"{SELECT_RESERVATIONS} WHERE r.id = :id")
_PAGE = text(
    f"""{SELECT_RESERVATIONS}
     WHERE (CAST(:project AS text) IS NULL OR r.project = :project)
     ORDER BY r.created_at DESC, r.id LIMIT :limit
    """
)
# Not locked: a reservation that ends meanwhile leaves the VM unschedulable (no slot left), which
# is what a VM arriving a moment later would get.
_NAMED = text(
    """
    SELECT id, status, cpu, memory_mb, disk_gb, gpu FROM reservations
     WHERE id = ANY(CAST(:ids AS uuid[])) AND project = :project
    """
)


async def check_reservations_fit(
    connection: AsyncConnection, bodies: Sequence[VmRequest], defaults: VmDefaults, project: str
) -> None:
    """Raise :class:`UnknownReservation` for the first VM naming a reservation that is not an open
    one of ``project`` or whose resources exceed a slot of it."""
    wanted = [body.reservation for body in bodies if body.reservation is not None]
    if not wanted:
        return
    found = {row.id: row for row in await connection.execute(_NAMED, {"ids": list(set(wanted)), "project": project})}
    for body in bodies:
        if body.reservation is None:
            continue
        row = found.get(body.reservation)
        if row is None:
            raise UnknownReservation(body.reservation)
        if ReservationStatus(row.status) not in OPEN:
            raise UnknownReservation(body.reservation, f"reservation {body.reservation} is {row.status}")
        asked = body.resources(defaults)
        slot = Resources(cpu=row.cpu, memory_mb=row.memory_mb, disk_gb=row.disk_gb, gpu=row.gpu)
        too_big = [
            f"{name}: {getattr(asked, name)} > {getattr(slot, name)}"
            for name in ("cpu", "memory_mb", "disk_gb", "gpu")
            if getattr(asked, name) > getattr(slot, name)
        ]
        if asked.extra:
            too_big.append("extra: a reservation holds no named extra resources")
        if too_big:
            raise UnknownReservation(
                body.reservation, f"the VM does not fit a slot of reservation {body.reservation} ({', '.join(too_big)})"
            )


class ReservationStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def create(
        self,
        *,
        project: str,
        resources: Resources,
        count: int,
        host_selector: Sequence[HostSelectorTerm],
        ends_at: datetime | None,
    ) -> ReservationRecord:
        """A pending reservation; raises QuotaExceeded (nothing made) past the project's quota, and
        UnknownProject."""
        reservation_id = uuid.uuid4()
        async with self.engine.begin() as connection:
            if (await connection.execute(_PROJECT, {"project": project})).first() is None:
                raise UnknownProject(project)
            await connection.execute(
                _INSERT,
                {
                    "id": reservation_id,
                    "project": project,
                    "status": ReservationStatus.PENDING.value,
                    "cpu": resources.cpu,
                    "memory_mb": resources.memory_mb,
                    "disk_gb": resources.disk_gb,
                    "gpu": resources.gpu,
                    "count": count,
                    "host_selector": json.dumps([term.model_dump(mode="json") for term in host_selector]),
                    "ends_at": ends_at,
                },
            )
            requested = {
                "instances": count,
                **{name: getattr(resources, name) * count for name in ("cpu", "memory_mb", "disk_gb", "gpu")},
            }
            await quota.enforce_amounts(connection, project, requested)
            row = (await connection.execute(_ONE, {"id": reservation_id})).one()
        return reservation_from_row(row)

    @retry_on_dead_connection
    async def get(self, reservation_id: UUID, project: str | None = None) -> ReservationRecord | None:
        """The reservation, if it is ``project``'s (any project's for None)."""
        async with self.engine.connect() as connection:
            row = (await connection.execute(_ONE, {"id": reservation_id})).first()
        if row is None or (project is not None and row.project != project):
            return None
        return reservation_from_row(row)

    @retry_on_dead_connection
    async def newest(self, project: str | None, limit: int) -> list[ReservationRecord]:
        """Newest first; every project's for None."""
        async with self.engine.connect() as connection:
            rows = (await connection.execute(_PAGE, {"project": project, "limit": limit})).all()
        return [reservation_from_row(row) for row in rows]

    @retry_on_dead_connection
    async def release(
        self, reservation_id: UUID, project: str | None = None
    ) -> tuple[ReservationRecord, list[UUID]] | None:
        """End the reservation (``released``) unless it has ended already: its held slots give their
        room back. The reservation as now recorded, and the slots released (their Redis claims are
        the caller's to release); None when ``project`` has no such reservation."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(_ONE, {"id": reservation_id})).first()
            if row is None or (project is not None and row.project != project):
                return None
            _, slots = await end_reservations(
                connection, [reservation_id], ReservationStatus.RELEASED, "released by DELETE /v1/reservations"
            )
            row = (await connection.execute(_ONE, {"id": reservation_id})).one()
        return reservation_from_row(row), slots
