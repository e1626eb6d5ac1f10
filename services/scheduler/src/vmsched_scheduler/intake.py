"""From ``vm.create`` messages to scheduling rounds and back: the consumer's side of the scheduler.

Every VM of every message a replica holds goes into the next round (up to ``max_vms`` a round;
what arrives while a round runs goes into the one after it, so rounds grow with the load). A VM
that finds no round running starts one at once: no timer waits for company. A
message is answered once all its VMs are settled: one ``vm.assigned`` with those that found a
host, one ``vm.unschedulable`` with those that did not, one ``vm.waiting`` with those that wait for
room; then the handler returns and the message is acked. A VM a round could not settle
(:class:`~vmsched_scheduler.round.Later`) goes into a later round after a short pause; past
``later_limit`` seconds the message is given back to the broker (the handler raises a transient
error), which redelivers it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from opentelemetry import context as otel_context

from vmsched_amqp import events
from vmsched_amqp.failures import TransientError
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import VmAssigned, VmCreate, VmMigrate, VmPreempted, VmUnschedulable, VmWaiting
from vmsched_domain.records import VmRecord
from vmsched_pg.outbox import publish_implied
from vmsched_runtime.batching import Batcher
from vmsched_runtime.logs import bound, get_logger
from vmsched_scheduler.metrics import ROUND_VMS
from vmsched_scheduler.migration_round import MigrationItem, MigrationOutcome, NoTargetFound, TargetChosen
from vmsched_scheduler.round import SchedulingRound
from vmsched_scheduler.round_items import Assigned, Ignored, Later, NotPlaced, Outcome, RoundItem, Waiting

log = get_logger("vmsched_scheduler")

FIRST_RETRY_DELAY = 0.05
LAST_RETRY_DELAY = 1.0

T = TypeVar("T")


async def until_settled(
    attempt: Callable[[], Awaitable[T]], later: Callable[[T], Later | None], limit: float, what: str
) -> T:
    """``attempt()`` again, after a pause that doubles up to LAST_RETRY_DELAY, while ``later`` says
    its result is :class:`Later`; past ``limit`` seconds, a transient error (the message goes back
    to the broker, which delivers it again). The one retry loop of the intake."""
    started = time.monotonic()
    delay = FIRST_RETRY_DELAY
    while True:
        result = await attempt()
        not_yet = later(result)
        if not_yet is None:
            return result
        if time.monotonic() - started > limit:
            raise TransientError(f"{what} not settled after {limit:g}s: {not_yet.why}")
        log.info(f"{what} not settled in this round; trying again", why=not_yet.why)
        await asyncio.sleep(delay)
        delay = min(delay * 2, LAST_RETRY_DELAY)


def _later(outcome: object) -> Later | None:
    return outcome if isinstance(outcome, Later) else None


class PlacementIntake:
    def __init__(
        self,
        scheduling_round: SchedulingRound,
        publisher: Publisher,
        *,
        send_deletes: Callable[[Sequence[VmRecord]], Awaitable[None]] | None = None,
        max_vms: int,
        max_delay: float = 0.0,
        later_limit: float = 60.0,
    ) -> None:
        self.round = scheduling_round
        self.publisher = publisher
        self.later_limit = later_limit
        # The delete command each preempted VM's status implies, sent and recorded as sent (the
        # outbox's sweeper sends again what this misses).
        self.send_deletes = send_deletes or (lambda records: publish_implied(publisher, records))
        self._batcher: Batcher[RoundItem, Outcome] = Batcher(
            self._run_round, name="placements", max_size=max_vms, max_delay=max_delay
        )

    async def place(self, message: VmCreate) -> None:
        """Settle every VM of ``message`` and announce them; the caller acks once this returns."""
        trace = otel_context.get_current()
        if any(vm.gang is not None for vm in message.vms):
            outcomes = await self._settle_gang([RoundItem(vm, trace) for vm in message.vms])
        else:
            outcomes = list(await asyncio.gather(*(self._settle(RoundItem(vm, trace)) for vm in message.vms)))
        assigned = [o for o in outcomes if isinstance(o, Assigned)]
        not_placed = [o for o in outcomes if isinstance(o, NotPlaced)]
        waiting = [o for o in outcomes if isinstance(o, Waiting)]
        # The victims' deletes go first, confirmed in their hosts' queues before vm.assigned leaves:
        # an agent takes its queue in order, so it deletes them before it creates their preemptor.
        await asyncio.gather(
            *(
                self._announce_preempted(vm.priority, outcome.preempted)
                for vm, outcome in zip(message.vms, outcomes, strict=True)
                if isinstance(outcome, Assigned) and outcome.preempted
            )
        )
        sends = []
        if assigned:
            sends.append(
                self.publisher.publish(events.VM_ASSIGNED, VmAssigned(assignments=[o.assignment for o in assigned]))
            )
        if not_placed:
            sends.append(
                self.publisher.publish(events.VM_UNSCHEDULABLE, VmUnschedulable(vms=[o.unplaced for o in not_placed]))
            )
        if waiting:
            sends.append(self.publisher.publish(events.VM_WAITING, VmWaiting(vms=[o.waiting for o in waiting])))
        await asyncio.gather(*sends)
        for vm, outcome in zip(message.vms, outcomes, strict=True):
            if isinstance(outcome, Assigned) and outcome.fresh:
                with bound(vm_id=str(vm.vm_id), host=outcome.assignment.hypervisor_id):
                    for line in outcome.log_lines:
                        log.info(line)
            elif isinstance(outcome, Ignored):
                log.info("vm.create ignored", vm_id=str(vm.vm_id), why=outcome.why)

    async def _announce_preempted(self, priority: int, victims: Sequence[VmRecord]) -> None:
        """``vm.preempted`` for each victim, and its agent's delete command."""
        # Not named ``events``: a local of that name would hide the module and raise NameError here.
        announcements = [
            self.publisher.publish(
                events.VM_PREEMPTED,
                VmPreempted(
                    vm_id=victim.id,
                    hypervisor_id=victim.hypervisor_id or "",
                    priority=victim.priority,
                    preempted_by=victim.preempted_by,
                    preemptor_priority=priority,
                    project=victim.project,
                ),
            )
            for victim in victims
            if victim.preempted_by is not None
        ]
        await asyncio.gather(*announcements, self.send_deletes(victims))

    async def _settle(self, item: RoundItem) -> Outcome:
        return await until_settled(lambda: self._batcher.submit(item), _later, self.later_limit, f"VM {item.vm.vm_id}")

    async def _settle_gang(self, items: list[RoundItem]) -> list[Outcome]:
        """An all-or-nothing batch: a round of its own (a batched round could cut it in two), tried
        again whole while any of it comes back :class:`Later`."""

        def any_later(outcomes: Iterable[Outcome]) -> Later | None:
            return next((o for o in outcomes if isinstance(o, Later)), None)

        return list(
            await until_settled(
                lambda: self._run_round_of(self.round.run_gang, items),
                any_later,
                self.later_limit,
                f"all-or-nothing batch of {len(items)}",
            )
        )

    async def _run_round(self, items: list[RoundItem]) -> Sequence[Outcome]:
        return await self._run_round_of(self.round.run, items)

    async def _run_round_of(
        self, run: Callable[[Sequence[RoundItem]], Awaitable[list[Outcome]]], items: list[RoundItem]
    ) -> Sequence[Outcome]:
        outcomes = await run(items)
        for outcome in outcomes:
            ROUND_VMS.labels(_kind(outcome)).inc()
        return outcomes

    async def drain(self) -> None:
        await self._batcher.drain()


def _kind(outcome: Outcome) -> str:
    if isinstance(outcome, Assigned):
        return "assigned"
    if isinstance(outcome, NotPlaced):
        return "not_placed"
    if isinstance(outcome, Waiting):
        return "waiting"
    if isinstance(outcome, Ignored):
        return "ignored"
    return "later"


class MigrationIntake:
    """``vm.migrate`` messages into migration rounds (batched as placements are), and the outcome
    announced: ``vm.migrating`` for a target claimed, ``vm.migration_failed`` for none; the message is
    acked once this returns."""

    def __init__(
        self,
        migration_round: SchedulingRound,
        publisher: Publisher,
        *,
        max_moves: int,
        max_delay: float = 0.0,
        later_limit: float = 60.0,
    ) -> None:
        self.round = migration_round
        self.publisher = publisher
        self.later_limit = later_limit
        self._batcher: Batcher[MigrationItem, MigrationOutcome] = Batcher(
            self._run_round, name="migrations", max_size=max_moves, max_delay=max_delay
        )

    async def migrate(self, message: VmMigrate) -> MigrationOutcome:
        """Choose, claim and commit the target of one migration, and announce it."""
        item = MigrationItem(message, otel_context.get_current())
        outcome = await until_settled(
            lambda: self._batcher.submit(item), _later, self.later_limit, f"VM {message.vm.vm_id}'s migration"
        )
        with bound(vm_id=str(message.vm.vm_id), migration=message.migration, source=message.source):
            if isinstance(outcome, TargetChosen):
                await self.publisher.publish(events.VM_MIGRATING, outcome.event)
                if outcome.fresh:
                    log.info(
                        f"Selected agent '{outcome.event.target}' as the migration target of VM '{message.vm.name}'"
                    )
            elif isinstance(outcome, NoTargetFound):
                await self.publisher.publish(events.VM_MIGRATION_FAILED, outcome.event)
                log.warning(f"No migration target for VM '{message.vm.name}': {outcome.event.detail}")
            else:
                log.info("vm.migrate ignored", why=outcome.why)
        return outcome

    async def _run_round(self, items: list[MigrationItem]) -> Sequence[MigrationOutcome]:
        outcomes = await self.round.run_migrations(items)
        for outcome in outcomes:
            ROUND_VMS.labels(_migration_kind(outcome)).inc()
        return outcomes

    async def drain(self) -> None:
        await self._batcher.drain()


def _migration_kind(outcome: MigrationOutcome) -> str:
    if isinstance(outcome, TargetChosen):
        return "migration_target"
    if isinstance(outcome, NoTargetFound):
        return "no_migration_target"
    if isinstance(outcome, Ignored):
        return "ignored"
    return "later"
