"""What follows a VM's task, once PostgreSQL says so: a migration's next command, its end (the claims
moved or given back in Redis, ``vm.migrated`` or ``vm.migration_failed``), a stop or start done; and
the sweeps that send a task's command again, roll back a migration in flight too long, and call off
at once a migration from or to a fenced host."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from vmsched_amqp import events
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import (
    CommandAction,
    MigrationOrder,
    VmMigrated,
    VmMigrating,
    VmMigrationFailed,
    VmStatusReport,
)
from vmsched_contract.status import Task
from vmsched_domain import live_migration
from vmsched_domain.claims import target_claim_id
from vmsched_domain.lifecycle import Capacity
from vmsched_domain.live_migration import Order, Step
from vmsched_domain.vm_changes import power_command
from vmsched_gateway.agent_queues import AgentQueues
from vmsched_gateway.command_ratios import CommandRatios
from vmsched_gateway.task_store import TaskStore
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import bound, get_logger

log = get_logger("vmsched_gateway")

# Answers to commands sent after a migration ended: nothing waits on them.
_AFTERMATH = frozenset({CommandAction.CLEANUP_MIGRATION, CommandAction.ABORT_MIGRATION})
# The source's commands that reach out to the target's hypervisor (to hand the VM over, or to take it
# back): they carry the target's migration URI, as its heartbeats announce it.
_TOWARDS_TARGET = frozenset({CommandAction.MIGRATE, CommandAction.ROLLBACK_MIGRATION})


@dataclass
class Tasks:
    store: TaskStore
    snapshot: Snapshot
    publisher: Publisher
    queues: AgentQueues

    async def on_migrating(self, event: VmMigrating) -> None:
        """A scheduler claimed the target: tell it to prepare."""
        await self.queues.ensure(event.target)
        order = MigrationOrder(number=event.migration, source=event.source, target=event.target)
        command = live_migration.prepare_command(event.vm_id, event.name, event.resources, order)
        await self.publisher.command(event.target, await CommandRatios(self.snapshot).stamp(event.target, command))
        log.info("migration: target told to prepare", vm_id=str(event.vm_id), source=event.source, target=event.target)

    async def on_migration_report(self, report: VmStatusReport) -> None:
        """A report on a migration's command: the step it makes, carried out."""
        if report.action in _AFTERMATH:
            log.info("migration aftermath reported", status=report.status.value, reason=report.message)
            return
        step = await self.store.migration_report(report)
        if step is None:
            log.info("migration report changed nothing")
            return
        await self.carry_out(step)

    async def on_power_report(self, report: VmStatusReport) -> None:
        change = await self.store.power_report(report)
        if change is None:
            log.info("power report changed nothing")
        else:
            log.info("VM power changed", status=change.after.status.value, reason=change.after.status_reason)

    async def carry_out(self, step: Step) -> None:
        """What a committed step implies: Redis's claims, the next commands, the events."""
        vm = step.change.after
        with bound(vm_id=str(vm.id), migration=step.change.before.migrations):
            capacity = step.change.transition.capacity
            if step.migrated:  # the source's claim given back, the target's is the VM's now
                await self.snapshot.move_claim(vm.id)
            elif capacity is Capacity.RELEASE:  # the source could not keep it after a rollback: failed
                await self.snapshot.release(vm.id)
                log.warning("VM failed", status=vm.status.value, reason=vm.status_reason)
            elif capacity is Capacity.RELEASE_TARGET:
                await self.snapshot.release(target_claim_id(vm.id))
            if step.then is not None:  # then failed on its fenced source: its share there given back too
                await self.snapshot.release(vm.id)
                log.warning("VM failed", status=step.then.after.status.value, reason=step.then.after.status_reason)
            for order in step.orders:
                await self.send(order)
            number = step.change.before.migrations
            if step.migrated:
                await self.publisher.publish(
                    events.VM_MIGRATED,
                    VmMigrated(vm_id=vm.id, migration=number, source=step.source, target=str(vm.hypervisor_id)),
                )
                log.info("VM migrated", source=step.source, target=vm.hypervisor_id)
            elif step.failed is not None:
                reason, detail = step.failed
                await self.publisher.publish(
                    events.VM_MIGRATION_FAILED,
                    VmMigrationFailed(
                        vm_id=vm.id,
                        migration=number,
                        source=step.source,
                        target=step.target,
                        reason=reason,
                        detail=detail,
                    ),
                )
                log.warning("migration rolled back", source=step.source, target=step.target, reason=detail)
            elif capacity is Capacity.KEEP:
                log.info("migration step", task=vm.task.value if vm.task else None)

    async def send(self, order: Order) -> None:
        """Put a migration's command on its host's queue, with the target's migration URI when the
        source needs it to reach the target's hypervisor."""
        command = order.command
        towards = command.migration
        if command.action in _TOWARDS_TARGET and towards is not None and towards.target_uri is None:
            uri = (await self.store.migration_uris([towards.target])).get(towards.target)
            if uri is not None:
                command = command.model_copy(update={"migration": towards.model_copy(update={"target_uri": uri})})
        command = await CommandRatios(self.snapshot).stamp(order.host, command)
        await self.queues.ensure(order.host)
        await self.publisher.command(order.host, command)

    async def sweep(self, *, migration_timeout: float, resend_after: float, exclude_for: float) -> None:
        """Call off migrations from or to a fenced host, roll back those in flight too long; send again
        what tasks have waited on too long."""
        for step in await self.store.fence_migrations(exclude_for=exclude_for):
            await self.carry_out(step)
        for step in await self.store.time_out_migrations(migration_timeout):
            await self.carry_out(step)
        now = time.time()
        for vm in await self.store.touch_stale_tasks(resend_after):
            with bound(vm_id=str(vm.id), task=vm.task.value if vm.task else None):
                if vm.task is Task.CHOOSING_TARGET:
                    log.warning("no scheduler chose the migration's target yet; asking again")
                    await self.publisher.publish(events.VM_MIGRATE, live_migration.request_of(vm, now))
                elif (order := live_migration.awaited(vm)) is not None:
                    log.warning("migration step unanswered; sending its command again", host=order.host)
                    await self.send(order)
                elif (action := power_command(vm)) is not None and vm.hypervisor_id is not None:
                    log.warning(f"{action.value} unanswered; sending it again", host=vm.hypervisor_id)
                    await self.publisher.command(vm.hypervisor_id, vm.command(action))

    async def sweep_forever(
        self, *, migration_timeout: float, resend_after: float, exclude_for: float, interval: float = 1.0
    ) -> None:
        while True:
            try:
                await self.sweep(
                    migration_timeout=migration_timeout, resend_after=resend_after, exclude_for=exclude_for
                )
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a server hiccup must not end the duty; the next round retries
                log.warning("task sweep failed", error=repr(error))
            await asyncio.sleep(interval)
