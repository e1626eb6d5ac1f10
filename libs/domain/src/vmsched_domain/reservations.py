"""Reservations: capacity held for one project, stated once (pure: no I/O).

A reservation asks for ``count`` slots of one size. The scheduler places its slots as it places an
all-or-nothing batch of VMs (the same engine, claim script and host guard), each slot keyed in Redis
by its own id (:func:`slot_id`), so a retry finds the claims an earlier try took. A held slot counts
in its host's allocations, in PostgreSQL and in the Redis snapshot, like a VM; the reconcile
rebuilds its claim from PostgreSQL. A VM of the reservation's project that names it takes one held
slot's room in one step (the slot's claim becomes the VM's, as a preemption swaps claims), and
nothing else can take it: the engine sees the room as allocated, and preemption removes VMs only.

At ``ends_at`` (or on DELETE) the slots still held are released; slots a VM took stay that VM's.

A held slot on a host that is lost (fenced, or silent past ``VMSCHED_AGENT_LOST_TIMEOUT`` while other
hosts are heard: the schedulers are not cut off) is ``lost``: its room goes with the host, and the scheduler
places it again (the same slot id, on another host, by the same rules); until some host fits it the
reservation counts it as ``lost`` and says so in ``status_reason``.
"""

from __future__ import annotations

import uuid
from enum import StrEnum

from vmsched_contract.status import ReservationStatus


class SlotStatus(StrEnum):
    HELD = "held"  # the room is the reservation's
    USED = "used"  # a VM naming the reservation took the room (it is the VM's now)
    RELEASED = "released"  # given back to the host unused
    LOST = "lost"  # its host was lost: the room went with it; placed again on another host when one fits


# A reservation in these may still be placed, used or ended.
OPEN: frozenset[ReservationStatus] = frozenset(
    {ReservationStatus.PENDING, ReservationStatus.HELD, ReservationStatus.UNSCHEDULABLE}
)


def slot_id(reservation_id: uuid.UUID, index: int) -> uuid.UUID:
    """The id of slot ``index`` (0-based) of a reservation: the same on every try, so a claim an
    earlier try took in Redis is found again (the claim script answers ``held``)."""
    return uuid.uuid5(reservation_id, f"slot-{index}")


def sql_in(statuses: frozenset[ReservationStatus]) -> str:
    """``('a', 'b')`` for ``status IN ...`` (this module's constants, never input)."""
    return "(" + ", ".join(f"'{s.value}'" for s in ReservationStatus if s in statuses) + ")"
