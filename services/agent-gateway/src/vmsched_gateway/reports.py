"""What agents report about VMs (``vm.status``), applied through the lifecycle; the capacity it
frees given back in Redis; the retry or the ``vm.deleted`` it implies published. A report about a
VM vmsched never placed on the reporting host is refused (vmsched_gateway.identity). Reports on a
migration's commands, a stop or a start go to :mod:`vmsched_gateway.tasks`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from uuid import UUID

from vmsched_amqp import events
from vmsched_amqp.failures import is_transient
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import (
    MIGRATION_ACTIONS,
    POWER_ACTIONS,
    CommandAction,
    ReportedStatus,
    VmDeleted,
    VmStatusReport,
)
from vmsched_contract.status import VmStatus
from vmsched_domain.lifecycle import HOLDS_CAPACITY
from vmsched_domain.records import VmRecord
from vmsched_gateway.command_ratios import CommandRatios
from vmsched_gateway.identity import MessageKind, Refusal, placed_on, refuse
from vmsched_gateway.orphans import Orphans
from vmsched_gateway.preemptors import Preemptors
from vmsched_gateway.report_store import AgentReport, Reported, ReportStore, RunningReport
from vmsched_gateway.tasks import Tasks
from vmsched_pg.outbox import publish_rows
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.batching import Batcher, each_alone_on_failure
from vmsched_runtime.logs import bound, get_logger

log = get_logger("vmsched_gateway")


@dataclass
class StatusReports:
    store: ReportStore
    snapshot: Snapshot
    publisher: Publisher
    orphans: Orphans
    tasks: Tasks
    preemptors: Preemptors | None = None
    running: Batcher[tuple[UUID, str], RunningReport] = field(init=False)
    others: Batcher[AgentReport, Reported] = field(init=False)  # "deleted" and "failed"

    def __post_init__(self) -> None:
        self.running = Batcher(self.store.mark_running, name="running_reports", max_size=256, max_delay=0.005)
        # A report PostgreSQL refuses fails alone, not with its batch (and every batch its redelivery joins).
        self.others = Batcher(
            partial(each_alone_on_failure, self.store.report_many, everyones=is_transient),
            name="status_reports",
            max_size=256,
            max_delay=0.005,
        )

    async def drain(self) -> None:
        await self.running.drain()
        await self.others.drain()

    async def on_status(self, report: VmStatusReport) -> None:
        """Apply ``report``; raises :class:`~vmsched_gateway.identity.AgentRefused` (the consumer
        dead-letters it) when the VM was never placed on the reporting host."""
        with bound(vm_id=str(report.vm_id), host=report.agent_id, reported=report.status.value):
            if report.action in POWER_ACTIONS:
                await self.tasks.on_power_report(report)
                return
            if report.action in MIGRATION_ACTIONS:
                await self.tasks.on_migration_report(report)
                return
            if report.status is ReportedStatus.RUNNING:
                await self._running(report)
                return
            reported = await self.others.submit(
                AgentReport(report.vm_id, report.agent_id, report.status, report.message)
            )
            change = reported.change
            if change is None:
                _check_placed(reported.vm, report)
                log.info("status report changed nothing")
                return
            if change.released_from is not None:
                await self.snapshot.release(change.after.id)
            log.info("VM settled", status=change.after.status.value, released_from=change.released_from)
            if change.after.status is VmStatus.PENDING:
                await publish_rows(self.publisher, self.store.engine, [change.after])
            elif change.after.status is VmStatus.DELETED:
                await self.publisher.publish(
                    events.VM_DELETED,
                    VmDeleted(vm_id=report.vm_id, hypervisor_id=report.agent_id, project=change.after.project),
                )
            if change.before.status is VmStatus.PREEMPTED and change.before.preempted_by is not None:
                await self._create_preemptor(change.before.preempted_by)

    async def _create_preemptor(self, preemptor_id: UUID) -> None:
        """Its create, now that the last VM it preempted is gone (see preemptors)."""
        preemptor = None if self.preemptors is None else await self.preemptors.ready(preemptor_id)
        if preemptor is None or preemptor.hypervisor_id is None:
            return
        command = await CommandRatios(self.snapshot).stamp(
            preemptor.hypervisor_id, preemptor.command(CommandAction.CREATE)
        )
        await self.publisher.command(preemptor.hypervisor_id, command)
        log.info("create sent: the VMs it preempted are deleted", preemptor=str(preemptor_id))

    async def _running(self, report: VmStatusReport) -> None:
        result = await self.running.submit((report.vm_id, report.agent_id))
        vm = result.vm
        if result.applied:
            log.info("VM running")
            return
        vm = _check_placed(vm, report)
        if vm.hypervisor_id == report.agent_id and vm.status in HOLDS_CAPACITY:
            return  # already running here, or being deleted: its delete command is on the way
        await self.orphans.found(report.agent_id, vm)


def _check_placed(vm: VmRecord | None, report: VmStatusReport) -> VmRecord:
    """``vm`` if vmsched placed it on the reporting host, now or before; else the report is refused."""
    if vm is None:
        raise refuse(MessageKind.STATUS, Refusal.NOT_PLACED_HERE, f"vmsched knows no VM {report.vm_id}")
    if not placed_on(vm, report.agent_id):
        raise refuse(
            MessageKind.STATUS,
            Refusal.NOT_PLACED_HERE,
            f"VM {report.vm_id} was never placed on host {report.agent_id} (it is {vm.status.value}"
            + (f" on {vm.hypervisor_id})" if vm.hypervisor_id else ")"),
        )
    return vm
