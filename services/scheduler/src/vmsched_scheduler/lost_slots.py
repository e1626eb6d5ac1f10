"""Held reservation slots whose host was lost (vmsched_domain.reservations: fenced, or silent past the
lost timeout): marked ``lost`` (their room left with the host), then placed again on other hosts by
the one round, each under its own slot id, with the reservation's selector and size, as the
reservation was placed in the first place.

Each reservation's lost slots go together, all or nothing (as its slots first did); while no host
takes them they stay ``lost``, counted in the reservation's ``lost`` with the round's reason in its
``status_reason``, and are tried again at every sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import VmToPlace
from vmsched_contract.status import ReservationStatus
from vmsched_domain.fit import RESOURCES
from vmsched_domain.reservations import SlotStatus
from vmsched_pg.reservation_store import LostSlot, lose_slots
from vmsched_pg.rows import trusted, trusted_selector
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.ports import Committed, NoHost, Placement, PlacementResult, Settlement
from vmsched_scheduler.reservations import HostRefused, SlotLedger, grow_hosts, refused_settlement, slot_round
from vmsched_scheduler.round import SchedulingRound
from vmsched_scheduler.round_items import Assigned, NotPlaced, RoundItem

log = get_logger(__name__)

_FIELDS = [rule.field for rule in RESOURCES]
# Reservations whose lost slots one sweep places again at most (the next sweep takes the rest).
SWEEP_SIZE = 20

LOST_TO_PLACE = text(
    f"""
    SELECT r.id, r.project, r.cpu, r.memory_mb, r.disk_gb, r.gpu, r.host_selector,
           array_agg(s.id ORDER BY s.id) AS slot_ids
      FROM reservations r JOIN reservation_slots s ON s.reservation_id = r.id
     WHERE r.status = '{ReservationStatus.HELD.value}' AND s.status = '{SlotStatus.LOST.value}'
     GROUP BY r.id ORDER BY r.id LIMIT :limit
    """
)
_LOCK_RESERVATION = text("SELECT status FROM reservations WHERE id = :id FOR UPDATE")
_PLACE_AGAIN = text(
    f"""
    UPDATE reservation_slots s SET hypervisor_id = p.host, status = '{SlotStatus.HELD.value}',
                                   placement = p.placement, updated_at = now()
      FROM unnest(CAST(:ids AS uuid[]), CAST(:hosts AS text[]), CAST(:records AS jsonb[])) AS p(id, host, placement)
     WHERE s.id = p.id AND s.status = '{SlotStatus.LOST.value}'
    RETURNING s.id
    """
)
_SAY = text("UPDATE reservations SET status_reason = :reason, updated_at = now() WHERE id = :id")


def lost_slot_requests(row: Any) -> list[RoundItem]:
    """A reservation's lost slots as the round's VM requests (their own ids: a claim an earlier try
    took is found again)."""
    resources = trusted(row.cpu, row.memory_mb, row.disk_gb, row.gpu)
    selector = list(trusted_selector(row.host_selector))
    return [
        RoundItem(
            VmToPlace(
                vm_id=slot,
                name=f"reservation-{row.id}-lost",
                resources=resources,
                host_selector=selector,
                project=row.project,
            )
        )
        for slot in row.slot_ids
    ]


class LostSlotLedger(SlotLedger):
    """The round's ledger for placing a held reservation's lost slots again: as :class:`SlotLedger`,
    but the reservation stays ``held`` whatever happens, and the slots' rows are moved rather than
    made."""

    async def settle(
        self, placements: Sequence[Placement], no_hosts: Sequence[NoHost], *, all_or_nothing: bool = False
    ) -> Settlement:
        """Every lost slot on its new host (each host's guard checked for all its slots at once), or,
        for ``no_hosts``, the reason kept in the reservation's ``status_reason``. Only while the
        reservation is held (else NOT_PENDING: it ended meanwhile)."""
        try:
            async with self.engine.begin() as connection:
                status = (await connection.execute(_LOCK_RESERVATION, {"id": self.reservation})).scalar()
                if status != ReservationStatus.HELD.value:
                    return _all(placements, no_hosts, Committed.NOT_PENDING, Committed.NOT_PENDING)
                if no_hosts:
                    reason = (
                        f"{len(no_hosts)} held slot(s) lost with their host fit nowhere else yet: {no_hosts[0].reason}"
                    )
                    await connection.execute(_SAY, {"id": self.reservation, "reason": reason})
                    return _all(placements, no_hosts, Committed.GANG_REFUSED, Committed.UNSCHEDULABLE)
                await grow_hosts(connection, placements)
                params: dict[str, Any] = {
                    "ids": [p.vm_id for p in placements],
                    "hosts": [p.host_id for p in placements],
                    "records": [p.record.model_dump_json() for p in placements],
                }
                if len((await connection.execute(_PLACE_AGAIN, params)).all()) != len(placements):
                    raise _MovedAlready  # another sweep placed them first: undo ours
                hosts = ", ".join(sorted({p.host_id for p in placements}))
                reason = f"{len(placements)} held slot(s) lost with their host placed again on {hosts}"
                await connection.execute(_SAY, {"id": self.reservation, "reason": reason})
                at = (await connection.execute(text("SELECT now()"))).scalar_one()
        except HostRefused as refused:
            return refused_settlement(placements, refused)
        except _MovedAlready:
            return _all(placements, no_hosts, Committed.NOT_PENDING, Committed.NOT_PENDING)
        return Settlement([PlacementResult(Committed.PLACED, at, at) for _ in placements], [])


class _MovedAlready(Exception):
    pass


def _all(
    placements: Sequence[Placement], no_hosts: Sequence[NoHost], placed: Committed, unplaced: Committed
) -> Settlement:
    return Settlement([PlacementResult(placed)] * len(placements), [unplaced] * len(no_hosts))


class LostSlots:
    """The sweep's two steps for slots on lost hosts: :meth:`lose` them, :meth:`place_again`."""

    def __init__(
        self,
        engine: AsyncEngine,
        snapshot: Snapshot,
        scheduling_round: SchedulingRound,
        *,
        lost_after: float,
        heard_within: float,
    ) -> None:
        self.engine = engine
        self.snapshot = snapshot
        self.round = scheduling_round
        self.lost_after = lost_after
        self.heard_within = heard_within

    async def lose(self) -> list[LostSlot]:
        """Mark lost the held slots of lost hosts; their claims in Redis go once that is committed
        (should that fail, the reconcile drops them: Redis over-counts meanwhile, never under)."""
        async with self.engine.begin() as connection:
            lost = await lose_slots(connection, lost_after=self.lost_after, heard_within=self.heard_within)
        if lost:
            await self.snapshot.release_many([slot.id for slot in lost])
            log.warning(
                "reservation slots lost with their host; placing them again",
                slots=len(lost),
                hosts=sorted({slot.host_id for slot in lost}),
                fenced=sorted({slot.host_id for slot in lost if slot.fenced}),
                reservations=sorted({str(slot.reservation_id) for slot in lost}),
            )
        return lost

    async def place_again(self) -> None:
        async with self.engine.connect() as connection:
            rows = (await connection.execute(LOST_TO_PLACE, {"limit": SWEEP_SIZE})).all()
        for row in rows:
            scheduling_round = slot_round(self.round, LostSlotLedger(self.engine, self.round.ledger, row.id))
            outcomes = await scheduling_round.run_gang(lost_slot_requests(row))
            if isinstance(outcomes[0], Assigned):
                log.info(
                    "lost reservation slots placed again",
                    reservation=str(row.id),
                    hosts=sorted({o.assignment.hypervisor_id for o in outcomes if isinstance(o, Assigned)}),
                )
            elif isinstance(outcomes[0], NotPlaced):
                log.warning(
                    "lost reservation slots fit nowhere yet",
                    reservation=str(row.id),
                    detail=outcomes[0].unplaced.detail,
                )
