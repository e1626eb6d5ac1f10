"""Reservations in PostgreSQL: what a reservation is read with (its row mapper is
:func:`vmsched_pg.rows.reservation_from_row`), and ending them (expired or released), shared by the API
(DELETE /v1/reservations/{id}) and the scheduler (the expiry sweep).

Locks, in the order every writer takes them: the reservation, then its slots, then their hosts in
id order (the VM consuming a slot locks the VM first, then the slot, then the host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from vmsched_contract.messages import HostStatus
from vmsched_contract.status import ReservationStatus
from vmsched_domain.reservations import OPEN, SlotStatus, sql_in
from vmsched_pg.rows import RESERVATION_FIELDS

# Each reservation with what its slots are: held, used by a VM, and the hosts they are on.
SELECT_RESERVATIONS = f"""
    SELECT {", ".join(f"r.{f}" for f in RESERVATION_FIELDS)},
           (SELECT count(*) FROM reservation_slots s
             WHERE s.reservation_id = r.id AND s.status = '{SlotStatus.HELD.value}') AS held,
           (SELECT count(*) FROM reservation_slots s
             WHERE s.reservation_id = r.id AND s.status = '{SlotStatus.USED.value}') AS used,
           (SELECT count(*) FROM reservation_slots s
             WHERE s.reservation_id = r.id AND s.status = '{SlotStatus.LOST.value}') AS lost,
           (SELECT coalesce(array_agg(DISTINCT s.hypervisor_id), ARRAY[]::text[]) FROM reservation_slots s
             WHERE s.reservation_id = r.id
               AND s.status IN ('{SlotStatus.HELD.value}', '{SlotStatus.USED.value}')) AS hosts
      FROM reservations r
"""

_END = text(
    f"""
    UPDATE reservations SET status = :status, status_reason = :reason, updated_at = now()
     WHERE id = ANY(CAST(:ids AS uuid[])) AND status IN {sql_in(OPEN)}
    RETURNING id
    """
)
_LOCK_HELD = text(
    f"""
    SELECT id, hypervisor_id, cpu, memory_mb, disk_gb, gpu FROM reservation_slots
     WHERE reservation_id = ANY(CAST(:ids AS uuid[])) AND status = '{SlotStatus.HELD.value}'
     ORDER BY id FOR UPDATE
    """
)
_LOCK_HOSTS = text("SELECT id FROM hosts WHERE id = ANY(CAST(:hosts AS text[])) ORDER BY id FOR UPDATE")
# Lost slots hold no room: an ended reservation only stops placing them again.
_RELEASE_LOST = text(
    f"""
    UPDATE reservation_slots SET status = '{SlotStatus.RELEASED.value}', updated_at = now()
     WHERE reservation_id = ANY(CAST(:ids AS uuid[])) AND status = '{SlotStatus.LOST.value}'
    """
)
_RELEASE_SLOTS = text(
    f"""
    UPDATE reservation_slots SET status = '{SlotStatus.RELEASED.value}', updated_at = now()
     WHERE id = ANY(CAST(:ids AS uuid[])) AND status = '{SlotStatus.HELD.value}'
    """
)
_SHRINK_HOSTS = text(
    """
    UPDATE hosts h
       SET alloc_cpu = h.alloc_cpu - s.cpu, alloc_memory_mb = h.alloc_memory_mb - s.memory_mb,
           alloc_disk_gb = h.alloc_disk_gb - s.disk_gb, alloc_gpu = h.alloc_gpu - s.gpu, vm_count = h.vm_count - s.n
      FROM (SELECT hypervisor_id, sum(cpu) AS cpu, sum(memory_mb) AS memory_mb, sum(disk_gb) AS disk_gb,
                   sum(gpu) AS gpu, count(*) AS n
              FROM reservation_slots WHERE id = ANY(CAST(:ids AS uuid[])) GROUP BY hypervisor_id) s
     WHERE h.id = s.hypervisor_id
    """
)
_DUE = text(
    f"""
    SELECT id FROM reservations
     WHERE status IN {sql_in(OPEN)} AND ends_at IS NOT NULL AND ends_at <= now()
     ORDER BY ends_at LIMIT :limit
    """
)


async def end_reservations(
    connection: AsyncConnection, ids: Sequence[UUID], status: ReservationStatus, reason: str
) -> tuple[list[UUID], list[UUID]]:
    """End the open reservations among ``ids`` (``expired`` or ``released``) in the caller's
    transaction: their held slots give their room back to the hosts. Returns (the reservations
    ended, the slots released): the caller releases those slots' claims in Redis once committed
    (until then, or should it fail, the reconcile drops them: Redis over-counts, never under)."""
    ended = [
        row.id for row in await connection.execute(_END, {"ids": list(ids), "status": status.value, "reason": reason})
    ]
    if not ended:
        return [], []
    await connection.execute(_RELEASE_LOST, {"ids": ended})
    slots = (await connection.execute(_LOCK_HELD, {"ids": ended})).all()
    if not slots:
        return ended, []
    await connection.execute(_LOCK_HOSTS, {"hosts": sorted({slot.hypervisor_id for slot in slots})})
    slot_ids = [slot.id for slot in slots]
    await connection.execute(_SHRINK_HOSTS, {"ids": slot_ids})
    await connection.execute(_RELEASE_SLOTS, {"ids": slot_ids})
    return ended, slot_ids


async def due_reservations(connection: AsyncConnection, limit: int = 100) -> list[UUID]:
    """Open reservations whose ``ends_at`` has passed (PostgreSQL's clock), soonest first."""
    return [row.id for row in await connection.execute(_DUE, {"limit": limit})]


# Held slots on hosts that are lost: fenced (declared down by an operator or the fence command: lost
# at once, whatever anyone hears, as the gateway fails their VMs at once), or silent past the lost
# timeout while some host was heard within the offline timeout: when none is, it is the schedulers
# that hear nothing (the gateway or the broker cut off), not the hosts that are gone (the gateway's
# FailureGrace reasons the same way about VMs).
_LOCK_LOST = text(
    f"""
    SELECT s.id, s.reservation_id, s.hypervisor_id, h.fenced_at IS NOT NULL AS fenced
      FROM reservation_slots s JOIN hosts h ON h.id = s.hypervisor_id
     WHERE s.status = '{SlotStatus.HELD.value}'
       AND (h.fenced_at IS NOT NULL
            OR (h.status = '{HostStatus.OFFLINE.value}'
                AND (h.last_heartbeat IS NULL OR h.last_heartbeat < now() - make_interval(secs => :lost))
                AND EXISTS (SELECT 1 FROM hosts a WHERE a.last_heartbeat >= now() - make_interval(secs => :heard))))
     ORDER BY s.id LIMIT :limit FOR UPDATE OF s SKIP LOCKED
    """
)
_MARK_LOST = text(
    f"""
    UPDATE reservation_slots SET status = '{SlotStatus.LOST.value}', updated_at = now()
     WHERE id = ANY(CAST(:ids AS uuid[])) AND status = '{SlotStatus.HELD.value}'
    """
)
_SAY_LOST = text(
    """
    UPDATE reservations SET status_reason = :reason, updated_at = now() WHERE id = :id
    """
)


@dataclass(frozen=True, slots=True)
class LostSlot:
    id: UUID
    reservation_id: UUID
    host_id: str
    fenced: bool = False  # its host was fenced (rather than silent past the lost timeout)


async def lose_slots(
    connection: AsyncConnection, *, lost_after: float, heard_within: float, limit: int = 500
) -> list[LostSlot]:
    """In the caller's transaction, mark ``lost`` the held slots of fenced hosts and of hosts silent
    for ``lost_after`` seconds (unless no host at all was heard within ``heard_within``): their room
    leaves the host's allocations, and each reservation says what it lost. The caller releases their
    claims in Redis once committed, and has them placed again (:mod:`vmsched_scheduler.lost_slots`)."""
    rows = (await connection.execute(_LOCK_LOST, {"lost": lost_after, "heard": heard_within, "limit": limit})).all()
    if not rows:
        return []
    lost = [LostSlot(row.id, row.reservation_id, row.hypervisor_id, row.fenced) for row in rows]
    await connection.execute(_LOCK_HOSTS, {"hosts": sorted({slot.host_id for slot in lost})})
    ids = [slot.id for slot in lost]
    await connection.execute(_SHRINK_HOSTS, {"ids": ids})
    await connection.execute(_MARK_LOST, {"ids": ids})
    by_reservation: dict[UUID, list[LostSlot]] = {}
    for slot in lost:
        by_reservation.setdefault(slot.reservation_id, []).append(slot)
    for reservation_id, slots in sorted(by_reservation.items()):
        hosts = ", ".join(sorted({f"{slot.host_id} (fenced)" if slot.fenced else slot.host_id for slot in slots}))
        reason = f"{len(slots)} held slot(s) lost with host {hosts}; being placed again"
        await connection.execute(_SAY_LOST, {"id": reservation_id, "reason": reason})
    return lost
