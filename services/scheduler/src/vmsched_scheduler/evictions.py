"""Preemption that moves (seed 001; issue 27): a victim that another host takes is live-migrated there
instead of deleted. The preemptor waits for its victims to leave, as it does for deletes: while any of
them is migrating off the host for it, its decision comes back :class:`Later`, and once they are gone
the room they left is there for it (it is decided again, as any VM). A victim that came back from a
failed move (rolled back onto the host) is not moved again for the same preemptor: it is deleted.

The choice of victims is the preemption's (vmsched_placement.preemption); moving them is tried only
when the host's agent can migrate and the engine finds a target for each (the migration's scheduler
then chooses the target as for any migration). The moves start in one transaction under the victims'
row locks and their groups' disruption budgets, the way a drain starts a migration. The preemptor
keeps the preemption (``vms.preemption``: its journal entry, the host, the victims): it is placed
later by a decision of its own, and a replay of it still names the victims and where they went.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_amqp import events
from vmsched_amqp.publishing import Publisher
from vmsched_contract.decision import JournalRef, PreemptionMove
from vmsched_contract.messages import PreemptionOutcome, VmPreempted
from vmsched_contract.status import VmStatus
from vmsched_domain import live_migration
from vmsched_domain.records import VmRecord
from vmsched_pg import vm_writes
from vmsched_pg.budgets import budgets
from vmsched_pg.rows import vm_from_row
from vmsched_scheduler.budget_guard import disrupted, refused
from vmsched_scheduler.group_guard import LOCK_GROUPS

_MOVING_FOR = text(f"SELECT count(*) FROM vms WHERE preempted_by = :id AND status = '{VmStatus.MIGRATING.value}'")
_KEEP_PREEMPTION = text("UPDATE vms SET preemption = CAST(:preemption AS jsonb) WHERE id = :id")


class Evictions(Protocol):
    async def moving_for(self, preemptor: UUID) -> int:
        """How many of ``preemptor``'s victims are migrating off its host now."""
        ...

    async def evict(
        self,
        preemptor: UUID,
        attempt: int,
        host_id: str,
        victims: Sequence[UUID],
        priority: int,
        journal: JournalRef | None = None,
    ) -> list[VmRecord] | None:
        """Start moving ``victims`` off ``host_id`` for ``preemptor`` (still pending at ``attempt``),
        whose preemption (``journal``: its decision) it keeps; the victims as committed, or None when
        nothing was started (anything changed meanwhile)."""
        ...

    async def announce(self, moving: Sequence[VmRecord], priority: int) -> None:
        """``vm.migrate`` for each victim (its scheduler chooses the target) and ``vm.preempted``."""
        ...


class PostgresEvictions:
    def __init__(self, engine: AsyncEngine, publisher: Publisher) -> None:
        self.engine = engine
        self.publisher = publisher

    async def moving_for(self, preemptor: UUID) -> int:
        async with self.engine.connect() as connection:
            return int((await connection.execute(_MOVING_FOR, {"id": preemptor})).scalar_one())

    async def evict(
        self,
        preemptor: UUID,
        attempt: int,
        host_id: str,
        victims: Sequence[UUID],
        priority: int,
        journal: JournalRef | None = None,
    ) -> list[VmRecord] | None:
        now = time.time()
        async with self.engine.begin() as connection:
            ids = sorted({preemptor, *victims})
            records = {row.id: vm_from_row(row) for row in await connection.execute(vm_writes.LOCK_VMS, {"ids": ids})}
            waiting = records.get(preemptor)
            if waiting is None or waiting.status is not VmStatus.PENDING or waiting.attempt != attempt:
                return None
            changes = []
            for vm_id in victims:
                vm = records.get(vm_id)
                if vm is None or vm.hypervisor_id != host_id or vm.priority >= priority or vm.preempted_by == preemptor:
                    return None
                change = live_migration.requested(vm, None, now)
                if change is None:
                    return None
                reason = f"moving off {host_id} for VM {preemptor} (priority {priority} > {vm.priority})"
                changes.append(
                    replace(change, after=replace(change.after, preempted_by=preemptor, status_reason=reason))
                )
            taking = disrupted(changes)
            if taking:
                await connection.execute(LOCK_GROUPS, {"ids": sorted(taking)})
                if refused(await budgets(connection, list(taking)), taking) is not None:
                    return None
            kept = PreemptionMove(
                journal=journal,
                host=host_id,
                victims=[str(vm_id) for vm_id in victims],
                decided_at=datetime.fromtimestamp(now, UTC),
            )
            await connection.execute(_KEEP_PREEMPTION, {"id": preemptor, "preemption": kept.model_dump_json()})
            return [change.after for change in await vm_writes.apply(connection, changes)]

    async def announce(self, moving: Sequence[VmRecord], priority: int) -> None:
        now = time.time()
        for victim in moving:
            await self.publisher.publish(events.VM_MIGRATE, live_migration.request_of(victim, now))
            if victim.preempted_by is not None:
                await self.publisher.publish(
                    events.VM_PREEMPTED,
                    VmPreempted(
                        vm_id=victim.id,
                        hypervisor_id=victim.hypervisor_id or "",
                        priority=victim.priority,
                        preempted_by=victim.preempted_by,
                        preemptor_priority=priority,
                        project=victim.project,
                        outcome=PreemptionOutcome.MOVED,
                    ),
                )
