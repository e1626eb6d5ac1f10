"""Reservations on the scheduler's side: placing them and ending them at ``ends_at``
(vmsched_domain.reservations).

A pending reservation is placed by the one round (:meth:`SchedulingRound.run_gang`): its slots are
an all-or-nothing batch of VM-sized requests, decided by the engine with every filter, claimed in
Redis by the claim script (keyed by slot id), and settled here, by :class:`SlotLedger`, under the
same fit rule in PostgreSQL. A reservation no host can take ends ``unschedulable`` with the round's
reasons and decision record.

One replica at a time sweeps (a Redis lock, as the reconcile takes), every
``VMSCHED_RESERVATION_INTERVAL``; every write is guarded by the reservation's status under its row
lock, so a sweep that outlives its lock changes nothing twice.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_contract.messages import HostStatus, VmToPlace
from vmsched_contract.status import ReservationStatus
from vmsched_contract.strategy import Strategy
from vmsched_domain.fit import RESOURCES, sql_fits
from vmsched_domain.records import VmRecord
from vmsched_domain.reservations import SlotStatus, slot_id
from vmsched_pg.reservation_store import due_reservations, end_reservations
from vmsched_pg.rows import trusted, trusted_selector
from vmsched_placement.preemption import Resident
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.ports import (
    Committed,
    Ledger,
    MigrationSettlement,
    NoHost,
    NoTarget,
    Placement,
    PlacementResult,
    Settlement,
    SlotTaken,
    TargetClaim,
)
from vmsched_scheduler.round import SchedulingRound
from vmsched_scheduler.round_items import Assigned, Later, NotPlaced, RoundItem

if TYPE_CHECKING:
    from vmsched_scheduler.lost_slots import LostSlots

log = get_logger(__name__)

_FIELDS = [rule.field for rule in RESOURCES]
# Reservations placed by one sweep at most (the next sweep takes the rest).
SWEEP_SIZE = 20

_PENDING = text(
    f"""
    SELECT id, project, cpu, memory_mb, disk_gb, gpu, count, host_selector FROM reservations
     WHERE status = '{ReservationStatus.PENDING.value}' ORDER BY created_at, id LIMIT :limit
    """
)
_LOCK_RESERVATION = text("SELECT status FROM reservations WHERE id = :id FOR UPDATE")
_LOCK_HOSTS = text("SELECT id FROM hosts WHERE id = ANY(CAST(:hosts AS text[])) ORDER BY id FOR UPDATE")
# The host takes ``n`` slots of the given total only within the fit rule, online and unpaused.
_GROW_HOST = text(
    f"""
    UPDATE hosts h SET {", ".join(f"alloc_{f} = h.alloc_{f} + :{f}" for f in _FIELDS)}, vm_count = h.vm_count + :n
     WHERE h.id = :host_id AND h.status = '{HostStatus.ONLINE.value}' AND NOT h.scheduling_paused
       AND {
        sql_fits(
            requested=lambda rule: f"CAST(:{rule.field} AS bigint)",
            capacity=lambda rule: f"h.{rule.field}",
            reserved=lambda rule: f"h.reserved_{rule.field}",
            ratio=lambda rule: f"h.{rule.ratio_field}" if rule.ratio_field else None,
            allocated=lambda rule: f"h.alloc_{rule.field}",
        )
    }
    RETURNING h.id
    """
)
_INSERT_SLOTS = text(
    f"""
    INSERT INTO reservation_slots (id, reservation_id, hypervisor_id, status, placement, {", ".join(_FIELDS)})
    SELECT s.id, :reservation, s.host, '{SlotStatus.HELD.value}', s.placement, {", ".join(f"s.{f}" for f in _FIELDS)}
      FROM unnest(CAST(:ids AS uuid[]), CAST(:hosts AS text[]), CAST(:records AS jsonb[]),
                  {", ".join(f"CAST(:{f} AS bigint[])" for f in _FIELDS)})
           AS s(id, host, placement, {", ".join(_FIELDS)})
    """
)
_HELD = text(
    f"""
    UPDATE reservations SET status = '{ReservationStatus.HELD.value}', status_reason = NULL,
                            placement = CAST(:record AS jsonb), updated_at = now()
     WHERE id = :id
    """
)
_UNSCHEDULABLE = text(
    f"""
    UPDATE reservations SET status = '{ReservationStatus.UNSCHEDULABLE.value}', status_reason = :reason,
                            placement = CAST(:record AS jsonb), updated_at = now()
     WHERE id = :id AND status = '{ReservationStatus.PENDING.value}'
    """
)


class HostRefused(Exception):
    """A host's guard refused its slots: raised out of the transaction, it undoes all of it."""

    def __init__(self, host_id: str) -> None:
        self.host_id = host_id


async def grow_hosts(connection: AsyncConnection, placements: Sequence[Placement]) -> None:
    """Add the slots of ``placements`` to their hosts' allocations, under each host's guard (online,
    unpaused, within the fit rule), hosts locked in id order; raises :class:`HostRefused` for the
    first host that cannot take its slots."""
    by_host: dict[str, list[Placement]] = defaultdict(list)
    for placement in placements:
        by_host[placement.host_id].append(placement)
    await connection.execute(_LOCK_HOSTS, {"hosts": sorted(by_host)})
    for host_id in sorted(by_host):
        slots = by_host[host_id]
        totals = {f: sum(getattr(p.resources, f) for p in slots) for f in _FIELDS}
        grown = await connection.execute(_GROW_HOST, {"host_id": host_id, "n": len(slots), **totals})
        if grown.first() is None:
            raise HostRefused(host_id)


def refused_settlement(placements: Sequence[Placement], refused: HostRefused) -> Settlement:
    """The host's own slots refused by its guard, the others with them (all or nothing)."""
    return Settlement(
        [
            PlacementResult(Committed.HOST_REFUSED if p.host_id == refused.host_id else Committed.GANG_REFUSED)
            for p in placements
        ],
        [],
    )


class SlotLedger:
    """The round's ledger for the slots of one reservation: "VMs" that are slots, placed all or
    nothing under each host's fit rule. What the round asks of VMs alone (loading rows, preemption,
    reservations, migration targets) finds nothing here: slots preempt nothing and are never preempted."""

    def __init__(self, engine: AsyncEngine, vms: Ledger, reservation: UUID) -> None:
        self.engine = engine
        self.vms = vms
        self.reservation = reservation

    async def default_strategy(self) -> Strategy:
        return await self.vms.default_strategy()

    async def online_hosts(self) -> int:
        return await self.vms.online_hosts()

    async def settle(
        self, placements: Sequence[Placement], no_hosts: Sequence[NoHost], *, all_or_nothing: bool = False
    ) -> Settlement:
        """Every slot on its host (each host's guard checked for all its slots at once), the
        reservation ``held``; or, for ``no_hosts``, the reservation ``unschedulable`` with the first
        one's reason. Only while the reservation is pending (else NOT_PENDING)."""
        try:
            async with self.engine.begin() as connection:
                status = (await connection.execute(_LOCK_RESERVATION, {"id": self.reservation})).scalar()
                if status != ReservationStatus.PENDING.value:
                    return Settlement(
                        [PlacementResult(Committed.NOT_PENDING)] * len(placements),
                        [Committed.NOT_PENDING] * len(no_hosts),
                    )
                if no_hosts:
                    first = no_hosts[0]
                    await connection.execute(
                        _UNSCHEDULABLE,
                        {"id": self.reservation, "reason": first.reason, "record": first.record.model_dump_json()},
                    )
                    return Settlement(
                        [PlacementResult(Committed.GANG_REFUSED)] * len(placements),
                        [Committed.UNSCHEDULABLE] * len(no_hosts),
                    )
                await grow_hosts(connection, placements)
                params: dict[str, Any] = {
                    "reservation": self.reservation,
                    "ids": [p.vm_id for p in placements],
                    "hosts": [p.host_id for p in placements],
                    # Each slot's own record: a VM that takes the slot records it (its replay).
                    "records": [p.record.model_dump_json() for p in placements],
                }
                params.update({f: [getattr(p.resources, f) for p in placements] for f in _FIELDS})
                await connection.execute(_INSERT_SLOTS, params)
                await connection.execute(
                    _HELD, {"id": self.reservation, "record": placements[0].record.model_dump_json()}
                )
                at = (await connection.execute(text("SELECT now()"))).scalar_one()
        except HostRefused as refused:
            return refused_settlement(placements, refused)
        return Settlement([PlacementResult(Committed.PLACED, at, at) for _ in placements], [])

    async def load(self, vm_ids: Sequence[UUID]) -> Mapping[UUID, VmRecord]:
        return {}  # slots are no VMs: a slot the round finds settled is announced as nothing

    async def residents(self, host_ids: Sequence[str], below: int) -> Mapping[str, list[Resident]]:
        return {}

    async def settle_preemption(
        self, placement: Placement, victims: Sequence[UUID], priority: int
    ) -> tuple[PlacementResult, list[VmRecord]]:
        return PlacementResult(Committed.NOT_PENDING), []

    async def take_slot(self, placement: Placement, reservation: UUID, project: str) -> SlotTaken:
        return SlotTaken(Committed.NO_SLOT, why="a slot takes no slot")

    async def settle_migrations(
        self, targets: Sequence[TargetClaim], no_targets: Sequence[NoTarget]
    ) -> MigrationSettlement:
        # A slot never migrates (a VM that took one migrates as any VM: the room is its own).
        return MigrationSettlement([Committed.NOT_PENDING] * len(targets), [Committed.NOT_PENDING] * len(no_targets))


def slot_round(scheduling_round: SchedulingRound, ledger: SlotLedger) -> SchedulingRound:
    """``scheduling_round``'s fleet, claims, settings, clock, randomness and journal, settling through
    ``ledger`` and without server groups (a slot joins none): the round slots are placed by."""
    return SchedulingRound(
        scheduling_round.fleet,
        scheduling_round.claims,
        ledger,
        scheduling_round.settings,
        clock=scheduling_round.clock,
        rng=scheduling_round.rng,
        journal=scheduling_round.journal,
    )


def slot_requests(row: Any) -> list[RoundItem]:
    """A pending reservation's slots, as the round's VM requests (priority 0: a reservation never
    preempts)."""
    resources = trusted(row.cpu, row.memory_mb, row.disk_gb, row.gpu)
    selector = list(trusted_selector(row.host_selector))
    return [
        RoundItem(
            VmToPlace(
                vm_id=slot_id(row.id, index),
                name=f"reservation-{row.id}-{index}",
                resources=resources,
                host_selector=selector,
                project=row.project,
            )
        )
        for index in range(row.count)
    ]


class ReservationSweeper:
    """Places pending reservations and ends expired ones (see the module's docstring)."""

    def __init__(
        self,
        engine: AsyncEngine,
        snapshot: Snapshot,
        scheduling_round: SchedulingRound,
        lost: LostSlots | None = None,
    ) -> None:
        self.engine = engine
        self.snapshot = snapshot
        self.round = scheduling_round
        self.lost = lost

    async def sweep(self) -> None:
        await self.expire()
        if self.lost is not None:
            await self.lost.lose()
        await self.place()
        if self.lost is not None:
            await self.lost.place_again()

    async def expire(self) -> list[UUID]:
        """End every open reservation past its ``ends_at``; returns those ended."""
        async with self.engine.begin() as connection:
            due = await due_reservations(connection)
            if not due:
                return []
            ended, slots = await end_reservations(connection, due, ReservationStatus.EXPIRED, "ends_at passed")
        await self.snapshot.release_many(slots)
        if ended:
            log.info("reservations expired", reservations=[str(r) for r in ended], slots_released=len(slots))
        return ended

    async def place(self) -> None:
        async with self.engine.connect() as connection:
            pending = (await connection.execute(_PENDING, {"limit": SWEEP_SIZE})).all()
        for row in pending:
            scheduling_round = slot_round(self.round, SlotLedger(self.engine, self.round.ledger, row.id))
            outcomes = await scheduling_round.run_gang(slot_requests(row))
            first = outcomes[0]
            if isinstance(first, Assigned):
                log.info(
                    "reservation held",
                    reservation=str(row.id),
                    hosts=sorted({o.assignment.hypervisor_id for o in outcomes if isinstance(o, Assigned)}),
                )
            elif isinstance(first, NotPlaced):
                log.warning("reservation unschedulable", reservation=str(row.id), detail=first.unplaced.detail)
            elif isinstance(first, Later):
                log.info("reservation not placed yet", reservation=str(row.id), why=first.why)


# How long a sweep's lock lasts at most (it is given back when the sweep ends): two sweeps placing one
# reservation at once would still place it once (PostgreSQL decides), but the loser would give back
# claims the winner holds, leaving the snapshot short until the reconcile.
SWEEP_LOCK_SECONDS = 60.0


async def sweep_forever(sweeper: ReservationSweeper, snapshot: Snapshot, interval: float) -> None:
    """Sweep every ``interval`` seconds; a Redis lock, held for the sweep, lets one replica at a time
    do it."""
    owner = uuid.uuid4().hex
    lock_key = f"{snapshot.prefix}:reservations-lock"
    while True:
        try:
            if await snapshot.redis.set(lock_key, owner, nx=True, px=int(SWEEP_LOCK_SECONDS * 1000)):
                try:
                    await sweeper.sweep()
                finally:
                    if await snapshot.redis.get(lock_key) == owner:
                        await snapshot.redis.delete(lock_key)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the loop outlives any one failure; the next sweep retries
            log.warning("reservation sweep failed", error=repr(error))
        await asyncio.sleep(interval)
