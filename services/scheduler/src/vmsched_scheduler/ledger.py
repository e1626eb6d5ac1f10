"""The scheduler's side of PostgreSQL, the truth: one transaction settles a whole round.

:meth:`PostgresLedger.settle` is the guard that makes overcommit impossible whatever Redis says:
the round's hosts are locked in id order (so that replicas queue on each other instead of
deadlocking), then in one statement every VM still pending at its attempt moves to ``scheduled``
and each host's allocations grow by what moved onto it, but only along the prefix of the host's
placements (in the round's order) that keeps it within the fit rule (named extra resources too),
online and unpaused. A placement past that prefix is refused (its claim is released and it is
decided again); the rest of the round is unaffected. The fit rule is pasted in from ``vmsched_domain.fit``.

Members of server groups are checked too, under their groups' row locks (:mod:`group_guard`): a
placement the group rule refuses is left out of the statement (GROUP_REFUSED). Leaving a spread
member out for capacity can unbalance the members after it, so a round where that happens is
settled again without it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_contract.decision import JournalKind, PlacementRecord
from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import HostStatus
from vmsched_contract.status import ReservationStatus, VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_domain.dedication import sql_takes
from vmsched_domain.extra import extra_json
from vmsched_domain.fit import RESOURCES, sql_extra_fits, sql_fits
from vmsched_domain.lifecycle import Condition, Event, sources, sql_in, transition
from vmsched_domain.records import VmRecord
from vmsched_domain.reservations import SlotStatus
from vmsched_domain.vm_changes import preempted
from vmsched_pg.budgets import budgets
from vmsched_pg.extra_sql import sql_extra_plus
from vmsched_pg.rows import VM_COLUMNS, vm_from_row
from vmsched_pg.vm_writes import LOCK_VMS, apply
from vmsched_placement.preemption import Resident
from vmsched_scheduler.budget_guard import disrupted, offered, refused
from vmsched_scheduler.group_guard import LOCK_GROUPS, hard_groups, refused_by_groups
from vmsched_scheduler.migration_ledger import settle_migrations
from vmsched_scheduler.ports import (
    Committed,
    MigrationSettlement,
    NoHost,
    NoTarget,
    Placement,
    PlacementResult,
    Settlement,
    SlotTaken,
    TargetClaim,
)
from vmsched_scheduler.reserve_guard import refused_by_reserve
from vmsched_scheduler.storage_guard import record_volumes, refused_by_pools

PLACED = transition(Event.PLACED, VmStatus.PENDING)
NO_HOST = transition(Event.NO_HOST, VmStatus.PENDING, Condition.MAY_NOT_WAIT)
NO_HOST_WAIT = transition(Event.NO_HOST, VmStatus.PENDING, Condition.MAY_WAIT)
_FIELDS = [rule.field for rule in RESOURCES]
# What PostgreSQL's guards refuse: in an all-or-nothing call, one of them undoes every placement.
_REFUSED = frozenset({Committed.HOST_REFUSED, Committed.GROUP_REFUSED, Committed.RESERVE_REFUSED})

# Locks, taken as every writer takes them: the VMs first, in id order, then their server groups, then
# their hosts, in id order
# (see vmsched_pg.vm_writes), so no two writers can each hold a row the other waits for.
# The VMs are found by id alone and their status checked under the lock, here: a statement that
# also asked for ``status = 'pending'`` let the planner, whose statistics predate a burst of
# requests, walk every pending VM instead (14 ms a round with a backlog of 10,000).
_LOCK_VMS = text("SELECT id, status, attempt FROM vms WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE")
_LOCK_HOSTS = text("SELECT id, labels FROM hosts WHERE id = ANY(CAST(:hosts AS text[])) ORDER BY id FOR UPDATE")

_FITS = sql_fits(
    requested=lambda rule: f"r.total_{rule.field}",
    capacity=lambda rule: f"h.{rule.field}",
    reserved=lambda rule: f"h.reserved_{rule.field}",
    ratio=lambda rule: f"h.{rule.ratio_field}" if rule.ratio_field else None,
    allocated=lambda rule: f"h.alloc_{rule.field}",
)
# One named extra resource a VM asks for (a row of ``asked``), on its host.
_EXTRA_FITS = sql_extra_fits(
    requested="a.total",
    capacity="coalesce(CAST(h.extra ->> a.name AS bigint), 0)",
    allocated="coalesce(CAST(h.alloc_extra ->> a.name AS bigint), 0)",
)
# Named extra resources are rows, one per (VM, name it asks for): a round without any has none, and
# pays only for finding that out.
_SETTLE_PLACEMENTS = text(
    f"""
    WITH input AS (
        SELECT * FROM unnest(CAST(:vm_ids AS uuid[]), CAST(:attempts AS int[]), CAST(:hosts AS text[]),
                             CAST(:strategies AS text[]), CAST(:records AS text[]),
                             {", ".join(f"CAST(:{f} AS bigint[])" for f in _FIELDS)}, CAST(:extras AS text[]))
               WITH ORDINALITY AS i(vm_id, attempt, host_id, strategy, record, {", ".join(_FIELDS)}, extra, ord)
    ), running AS (
        -- what the host would hold of this round once each VM (and those before it) is on it
        SELECT i.*, {", ".join(f"sum(i.{f}) OVER w AS total_{f}" for f in _FIELDS)}
          FROM input i WINDOW w AS (PARTITION BY i.host_id ORDER BY i.ord)
    ), asked AS (
        -- the same per named extra resource a VM asks for
        SELECT i.ord, i.host_id, e.key AS name,
               sum(CAST(e.value AS bigint)) OVER (PARTITION BY i.host_id, e.key ORDER BY i.ord) AS total
          FROM input i CROSS JOIN LATERAL jsonb_each_text(CAST(i.extra AS jsonb)) AS e
    ), extra_fits AS (
        SELECT a.ord, bool_and({_EXTRA_FITS}) AS fits FROM asked a JOIN hosts h ON h.id = a.host_id GROUP BY a.ord
    ), fitting AS (
        SELECT r.vm_id, r.attempt, r.host_id, r.strategy, r.record, {", ".join(f"r.{f}" for f in _FIELDS)}, r.extra,
               bool_and(h.status = '{HostStatus.ONLINE.value}' AND NOT h.scheduling_paused AND {_FITS}
                        AND coalesce(x.fits, true) AND {sql_takes("h", "vm")})
                   OVER (PARTITION BY r.host_id ORDER BY r.ord) AS fits
          FROM running r JOIN hosts h ON h.id = r.host_id JOIN vms vm ON vm.id = r.vm_id
          LEFT JOIN extra_fits x ON x.ord = r.ord
    ), placed AS (
        UPDATE vms v
           SET status = '{PLACED.target.value}', hypervisor_id = f.host_id, strategy = f.strategy,
               scheduled_at = now(), started_at = NULL, updated_at = now(), status_reason = NULL,
               placement = CAST(f.record AS jsonb)
          FROM fitting f
         WHERE v.id = f.vm_id AND f.fits
     RETURNING v.id, v.created_at, v.scheduled_at, f.host_id, {", ".join(f"f.{f}" for f in _FIELDS)}, f.extra
    ), added AS (
        -- the named extra resources each host takes on, as a map
        SELECT sums.host_id, jsonb_object_agg(sums.name, sums.total) AS extra
          FROM (SELECT p.host_id, e.key AS name, sum(CAST(e.value AS bigint)) AS total
                  FROM placed p CROSS JOIN LATERAL jsonb_each_text(CAST(p.extra AS jsonb)) AS e
                 GROUP BY p.host_id, e.key) sums
         GROUP BY sums.host_id
    ), grown AS (
        UPDATE hosts h
           SET {", ".join(f"alloc_{f} = h.alloc_{f} + s.{f}" for f in _FIELDS)}, vm_count = h.vm_count + s.vms,
               alloc_extra = CASE WHEN a.extra IS NULL THEN h.alloc_extra
                                  ELSE {sql_extra_plus("h.alloc_extra", "a.extra")} END
          FROM (SELECT host_id, {", ".join(f"sum({f}) AS {f}" for f in _FIELDS)}, count(*) AS vms
                  FROM placed GROUP BY host_id) s
          LEFT JOIN added a ON a.host_id = s.host_id
         WHERE h.id = s.host_id
     RETURNING h.id
    )
    SELECT i.vm_id, p.created_at, p.scheduled_at, (SELECT count(*) FROM grown) AS hosts_grown
      FROM input i
      LEFT JOIN fitting f ON f.vm_id = i.vm_id
      LEFT JOIN placed p ON p.id = i.vm_id
     ORDER BY i.ord
    """
)

_SETTLE_NO_HOSTS = text(
    f"""
    UPDATE vms v
       SET status = CASE WHEN v.wait_until > now() THEN '{NO_HOST_WAIT.target.value}'
                         ELSE '{NO_HOST.target.value}' END,
           status_reason = i.reason, strategy = i.strategy, placement = CAST(i.record AS jsonb), updated_at = now()
      FROM unnest(CAST(:vm_ids AS uuid[]), CAST(:reasons AS text[]), CAST(:strategies AS text[]),
                  CAST(:records AS text[])) AS i(vm_id, reason, strategy, record)
     WHERE v.id = i.vm_id
    RETURNING v.id, v.status, v.wait_until
    """
)

_LOAD = text(f"SELECT {VM_COLUMNS} FROM vms WHERE id = ANY(CAST(:ids AS uuid[]))")

_RESIDENTS = text(
    f"""
    SELECT id, hypervisor_id, priority, cpu, memory_mb, disk_gb, gpu, extra, server_group FROM vms
     WHERE hypervisor_id = ANY(CAST(:hosts AS text[])) AND status IN {sql_in(sources(Event.PREEMPTED))}
       AND priority < :below
     ORDER BY hypervisor_id, priority, id
    """
)

# A slot the VM's reservation still holds on a host that is online (a VM sent to a silent host would
# not run); one another VM is taking at this instant is skipped.
_FREE_SLOT = text(
    f"""
    SELECT s.id, s.hypervisor_id, s.placement, {", ".join(f"s.{f}" for f in _FIELDS)} FROM reservation_slots s
      JOIN reservations r ON r.id = s.reservation_id
      JOIN hosts h ON h.id = s.hypervisor_id
     WHERE s.reservation_id = :reservation AND r.project = :project
       AND r.status = '{ReservationStatus.HELD.value}' AND s.status = '{SlotStatus.HELD.value}'
       AND h.status = '{HostStatus.ONLINE.value}'
     ORDER BY s.id LIMIT 1 FOR UPDATE OF s SKIP LOCKED
    """
)
_RESERVATION_STATE = text(
    f"""
    SELECT r.status, r.count,
           count(s.id) AS held, count(s.id) FILTER (WHERE h.status = '{HostStatus.ONLINE.value}') AS held_online
      FROM reservations r
      LEFT JOIN reservation_slots s ON s.reservation_id = r.id AND s.status = '{SlotStatus.HELD.value}'
      LEFT JOIN hosts h ON h.id = s.hypervisor_id
     WHERE r.id = :reservation AND r.project = :project
     GROUP BY r.id
    """
)
_USE_SLOT = text(
    f"""
    UPDATE reservation_slots SET status = '{SlotStatus.USED.value}', vm_id = :vm_id, updated_at = now()
     WHERE id = :id
    """
)
_SCHEDULE_IN_SLOT = text(
    f"""
    UPDATE vms SET status = '{PLACED.target.value}', hypervisor_id = :host_id, strategy = :strategy,
                   scheduled_at = now(), started_at = NULL, updated_at = now(), status_reason = NULL,
                   placement = CAST(:record AS jsonb)
     WHERE id = :vm_id
    RETURNING created_at, scheduled_at
    """
)
# The slot's room becomes the VM's (no larger: the API refuses a VM that does not fit a slot); the
# host holds one VM where it held one slot.
_SLOT_TO_VM = text(
    f"""
    UPDATE hosts SET {", ".join(f"alloc_{f} = alloc_{f} - :slot_{f} + :vm_{f}" for f in _FIELDS)}
     WHERE id = :host_id
    """
)

_ONLINE_HOSTS = text(f"SELECT count(*) FROM hosts WHERE status = '{HostStatus.ONLINE.value}' AND NOT scheduling_paused")

_DEFAULT_STRATEGY = text("SELECT value FROM scheduler_settings WHERE key = 'default_strategy'")


def _placement_params(placements: Sequence[Placement]) -> dict[str, Any]:
    params: dict[str, Any] = {
        "vm_ids": [p.vm_id for p in placements],
        "attempts": [p.attempt for p in placements],
        "hosts": [p.host_id for p in placements],
        "strategies": [p.strategy.value for p in placements],
        "records": [p.record.model_dump_json() for p in placements],
    }
    for field in _FIELDS:
        params[field] = [getattr(p.resources, field) for p in placements]
    params["extras"] = [extra_json(p.resources.extra) for p in placements]
    return params


def _unbalanced_spreads(settling: list[Placement], placed: Mapping[UUID, PlacementResult]) -> set[UUID]:
    """Spread members the fit rule refused while a member of their group after them was placed: the
    group check counted them, so those after may break the spread."""
    gaps: set[UUID] = set()
    found: set[UUID] = set()
    for placement in settling:
        group = placement.group
        if group is None or group.rule.policy is not GroupPolicy.SPREAD:
            continue
        outcome = placed[placement.vm_id].outcome
        if outcome is Committed.HOST_REFUSED:
            gaps.add(group.rule.id)
            found.add(placement.vm_id)
        elif outcome is Committed.PLACED and group.rule.id in gaps:
            return found
    return set()


def slot_record(record: PlacementRecord, host_id: str, slot: Mapping[str, Any] | None) -> PlacementRecord:
    """The record of a VM placed in a reservation's slot on ``host_id``: the slot's own decision (the
    engine chose the host for the slot when it placed the reservation), journal entry included, so
    that the VM's replay makes that decision again; ``record`` (the reservation named) for a slot
    placed before slots kept their decision."""
    if slot is None:
        return record.model_copy(update={"host": host_id})
    decided = PlacementRecord.model_validate(slot)
    journal = decided.journal
    if journal is not None:
        journal = journal.model_copy(update={"kind": JournalKind.RESERVATION_SLOT})
    return decided.model_copy(update={"host": host_id, "detail": record.detail, "journal": journal})


class PostgresLedger:
    def __init__(
        self, engine: AsyncEngine, *, default_strategy: Strategy, strategy_ttl: float = 2.0, ha_reserve_hosts: int = 0
    ) -> None:
        self.engine = engine
        self.ha_reserve_hosts = ha_reserve_hosts  # VMSCHED_HA_RESERVE_HOSTS: placements keep the reserve
        self._configured_default = default_strategy
        self._cached_default: tuple[float, Strategy] | None = None
        self._strategy_ttl = strategy_ttl

    async def settle(
        self, placements: Sequence[Placement], no_hosts: Sequence[NoHost], *, all_or_nothing: bool = False
    ) -> Settlement:
        """Placements and "no host" records of VMs still pending at their attempt (checked under the
        VMs' locks: the statements change only those), each placement under its host's guard and its
        server group's; with ``all_or_nothing``, the placements in a savepoint undone if either guard
        refuses any of them (the others GANG_REFUSED)."""
        async with self.engine.begin() as connection:
            vm_ids = sorted({p.vm_id for p in placements} | {n.vm_id for n in no_hosts})
            locked = {row.id: row for row in await connection.execute(_LOCK_VMS, {"ids": vm_ids})}

            def pending(vm_id: UUID, attempt: int) -> bool:
                row = locked.get(vm_id)
                return row is not None and row.status == PLACED.source.value and row.attempt == attempt

            moving = [p for p in placements if pending(p.vm_id, p.attempt)]
            placed: dict[UUID, PlacementResult] = {}
            if moving:
                groups = hard_groups(moving)
                if groups:
                    await connection.execute(LOCK_GROUPS, {"ids": groups})
                rows = await connection.execute(_LOCK_HOSTS, {"hosts": sorted({p.host_id for p in moving})})
                labels = {row.id: row.labels or {} for row in rows}
                savepoint = await connection.begin_nested() if all_or_nothing else None
                kept_out = await refused_by_reserve(connection, moving, self.ha_reserve_hosts)
                placed = {vm_id: PlacementResult(Committed.RESERVE_REFUSED) for vm_id in kept_out}
                inside = [p for p in moving if p.vm_id not in kept_out]
                if inside:
                    placed.update(await self._settle_placements(connection, inside, labels))
                if savepoint is not None:
                    if any(r.outcome in _REFUSED for r in placed.values()):
                        await savepoint.rollback()
                        placed = {
                            vm_id: r if r.outcome in _REFUSED else PlacementResult(Committed.GANG_REFUSED)
                            for vm_id, r in placed.items()
                        }
                    else:
                        await savepoint.commit()
            unplaceable = [n for n in no_hosts if pending(n.vm_id, n.attempt)]
            waiting: dict[UUID, datetime] = {}
            if unplaceable:
                recorded = await connection.execute(
                    _SETTLE_NO_HOSTS,
                    {
                        "vm_ids": [n.vm_id for n in unplaceable],
                        "reasons": [n.reason for n in unplaceable],
                        "strategies": [n.strategy.value for n in unplaceable],
                        "records": [n.record.model_dump_json() for n in unplaceable],
                    },
                )
                waiting = {row.id: row.wait_until for row in recorded if row.status == NO_HOST_WAIT.target.value}
        marked = {n.vm_id for n in unplaceable}

        def recorded_as(vm_id: UUID) -> Committed:
            if vm_id in waiting:
                return Committed.WAITING
            return Committed.UNSCHEDULABLE if vm_id in marked else Committed.NOT_PENDING

        return Settlement(
            [placed.get(p.vm_id, PlacementResult(Committed.NOT_PENDING)) for p in placements],
            [recorded_as(n.vm_id) for n in no_hosts],
            waiting,
        )

    async def _settle_placements(
        self, connection: AsyncConnection, moving: list[Placement], labels: Mapping[str, Mapping[str, str]]
    ) -> dict[UUID, PlacementResult]:
        """The placements under the group rule and each host's fit rule, in one statement; with a
        spread among them, under a savepoint, and again without a spread member the fit rule refused
        if a member of its group came after it."""
        if not any(p.group is not None and p.group.rule.policy is GroupPolicy.SPREAD for p in moving):
            return await self._settle_once(connection, moving, labels)
        unfit: set[UUID] = set()
        while True:
            savepoint = await connection.begin_nested()
            trying = [p for p in moving if p.vm_id not in unfit]
            placed = await self._settle_once(connection, trying, labels)
            placed.update({vm_id: PlacementResult(Committed.HOST_REFUSED) for vm_id in unfit})
            again = _unbalanced_spreads(trying, placed)
            if not again:
                await savepoint.commit()
                return placed
            await savepoint.rollback()
            unfit |= again

    async def _settle_once(
        self, connection: AsyncConnection, moving: list[Placement], labels: Mapping[str, Mapping[str, str]]
    ) -> dict[UUID, PlacementResult]:
        refused = await refused_by_groups(connection, moving, labels)
        placed = {vm_id: PlacementResult(Committed.GROUP_REFUSED) for vm_id in refused}
        settling = [p for p in moving if p.vm_id not in refused]
        # A storage pool without room for a VM's volumes refuses it as a full host would.
        short = await refused_by_pools(connection, settling)
        placed.update({vm_id: PlacementResult(Committed.HOST_REFUSED) for vm_id in short})
        settling = [p for p in settling if p.vm_id not in short]
        if settling:
            for row in await connection.execute(_SETTLE_PLACEMENTS, _placement_params(settling)):
                placed[row.vm_id] = (
                    PlacementResult(Committed.PLACED, row.scheduled_at, row.created_at)
                    if row.scheduled_at is not None
                    else PlacementResult(Committed.HOST_REFUSED)
                )
            done = {vm_id for vm_id, result in placed.items() if result.outcome is Committed.PLACED}
            await record_volumes(connection, settling, done)
        return placed

    async def settle_migrations(
        self, targets: Sequence[TargetClaim], no_targets: Sequence[NoTarget]
    ) -> MigrationSettlement:
        """Migration targets and "no target" records (see :mod:`vmsched_scheduler.migration_ledger`)."""
        return await settle_migrations(self.engine, targets, no_targets)

    async def load(self, vm_ids: Sequence[UUID]) -> Mapping[UUID, VmRecord]:
        if not vm_ids:
            return {}
        async with self.engine.connect() as connection:
            rows = (await connection.execute(_LOAD, {"ids": list(vm_ids)})).all()
        return {row.id: vm_from_row(row) for row in rows}

    async def residents(self, host_ids: Sequence[str], below: int) -> Mapping[str, list[Resident]]:
        if not host_ids or below <= 0:
            return {}
        async with self.engine.connect() as connection:
            rows = (await connection.execute(_RESIDENTS, {"hosts": list(host_ids), "below": below})).all()
            groups = await budgets(connection, [row.server_group for row in rows if row.server_group is not None])
        return offered(rows, groups)

    async def settle_preemption(
        self, placement: Placement, victims: Sequence[UUID], priority: int
    ) -> tuple[PlacementResult, list[VmRecord]]:
        async with self.engine.connect() as connection, connection.begin() as transaction:
            ids = sorted({placement.vm_id, *victims})
            records = {row.id: vm_from_row(row) for row in await connection.execute(LOCK_VMS, {"ids": ids})}
            preemptor = records.get(placement.vm_id)
            if preemptor is None or preemptor.status is not PLACED.source or preemptor.attempt != placement.attempt:
                return PlacementResult(Committed.NOT_PENDING), []
            changes = []
            for vm_id in victims:
                victim = records.get(vm_id)
                change = (
                    None if victim is None or victim.priority >= priority else preempted(victim, preemptor, priority)
                )
                if change is None or change.before.hypervisor_id != placement.host_id:
                    return PlacementResult(Committed.VICTIM_MOVED), []
                changes.append(change)
            # The preemptor's group and the victims' (their disruption budgets), locked at once, in id order.
            taking = disrupted(changes)
            groups = sorted(set(hard_groups([placement])) | set(taking))
            if groups:
                await connection.execute(LOCK_GROUPS, {"ids": groups})
            if refused(await budgets(connection, list(taking)), taking) is not None:
                return PlacementResult(Committed.BUDGET_SPENT), []
            rows = await connection.execute(_LOCK_HOSTS, {"hosts": [placement.host_id]})
            labels = {row.id: row.labels or {} for row in rows}
            landed = await apply(connection, changes)  # their room goes back to the host...
            if len(landed) != len(changes):
                # A victim not taken: the preemptor would not fit, and is not placed (not PLACED with
                # no victims after a rollback, which the caller would announce as placed).
                await transaction.rollback()
                return PlacementResult(Committed.VICTIM_MOVED), []
            result = (await self._settle_placements(connection, [placement], labels))[placement.vm_id]
            if result.outcome is not Committed.PLACED:
                await transaction.rollback()  # ...and stays theirs unless the preemptor takes it
                return result, []
        return result, [change.after for change in landed]

    async def take_slot(self, placement: Placement, reservation: UUID, project: str) -> SlotTaken:
        params = {"reservation": reservation, "project": project}
        async with self.engine.begin() as connection:
            vm = (await connection.execute(_LOCK_VMS, {"ids": [placement.vm_id]})).first()
            if vm is None or vm.status != PLACED.source.value or vm.attempt != placement.attempt:
                return SlotTaken(Committed.NOT_PENDING)
            slot = (await connection.execute(_FREE_SLOT, params)).first()
            if slot is None:
                state = (await connection.execute(_RESERVATION_STATE, params)).first()
                if state is None:
                    return SlotTaken(Committed.NO_SLOT, why=f"no reservation {reservation} of project {project}")
                # Not placed yet (a VM asked right after its reservation), or its slots being taken
                # by other VMs at this instant: a later round finds out.
                if state.status == ReservationStatus.PENDING.value or (
                    state.status == ReservationStatus.HELD.value and state.held_online > 0
                ):
                    return SlotTaken(Committed.SLOT_BUSY)
                why = f"reservation {reservation} is {state.status}"
                if state.status == ReservationStatus.HELD.value and state.held > 0:
                    why = f"the {state.held} slots reservation {reservation} holds are on hosts not online"
                elif state.status == ReservationStatus.HELD.value:
                    why = f"every slot of reservation {reservation} is used ({state.count} of {state.count})"
                return SlotTaken(Committed.NO_SLOT, why=why)
            host_id = slot.hypervisor_id
            await connection.execute(_LOCK_HOSTS, {"hosts": [host_id]})
            await connection.execute(_USE_SLOT, {"id": slot.id, "vm_id": placement.vm_id})
            record = slot_record(placement.record, host_id, slot.placement)
            placed = (
                await connection.execute(
                    _SCHEDULE_IN_SLOT,
                    {
                        "vm_id": placement.vm_id,
                        "host_id": host_id,
                        "strategy": placement.strategy.value,
                        "record": record.model_dump_json(),
                    },
                )
            ).one()
            amounts = {f"slot_{f}": getattr(slot, f) for f in _FIELDS}
            amounts.update({f"vm_{f}": getattr(placement.resources, f) for f in _FIELDS})
            await connection.execute(_SLOT_TO_VM, {"host_id": host_id, **amounts})
        return SlotTaken(Committed.PLACED, host_id, slot.id, placed.scheduled_at, placed.created_at)

    async def online_hosts(self) -> int:
        async with self.engine.connect() as connection:
            return int((await connection.execute(_ONLINE_HOSTS)).scalar_one())

    async def default_strategy(self) -> Strategy:
        """The cluster default: set at runtime in PostgreSQL, else SCHEDULING_STRATEGY. Cached briefly."""
        now = time.monotonic()
        if self._cached_default is not None and now - self._cached_default[0] < self._strategy_ttl:
            return self._cached_default[1]
        async with self.engine.connect() as connection:
            value = (await connection.execute(_DEFAULT_STRATEGY)).scalar()
        strategy = Strategy(value) if value in {s.value for s in Strategy} else self._configured_default
        self._cached_default = (now, strategy)
        return strategy
