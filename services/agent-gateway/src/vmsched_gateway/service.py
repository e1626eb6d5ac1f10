"""What the gateway does with each message; plain async code, FastStream stays in ``app``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from faststream.rabbit import RabbitBroker

from vmsched_common import topology
from vmsched_common.batching import Batcher
from vmsched_common.logs import bound, get_logger
from vmsched_common.messages import (
    AgentCommand,
    AgentHeartbeat,
    CommandAction,
    ReportedStatus,
    VmAssigned,
    VmDeleted,
    VmStatusReport,
)
from vmsched_common.outbox import VmRow, publish_rows, send_command
from vmsched_common.settings import Settings
from vmsched_common.snapshot import HeartbeatWrite, Snapshot
from vmsched_gateway.store import GatewayStore, HostAllocation, StatusChange

log = get_logger("vmsched_gateway")

PublishDeleted = Callable[[VmDeleted], Awaitable[None]]


@dataclass
class Gateway:
    settings: Settings
    broker: RabbitBroker
    store: GatewayStore
    snapshot: Snapshot
    publish_deleted: PublishDeleted
    declared_queues: set[str] = field(default_factory=set)
    heartbeats: Batcher[AgentHeartbeat, None] = field(init=False)
    running_reports: Batcher[tuple[UUID, str], VmRow | None] = field(init=False)

    def __post_init__(self) -> None:
        self.heartbeats = Batcher(self._fold_heartbeats, name="heartbeats", max_size=500, max_delay=0.05)
        # "running" is most of the status traffic (one per placed VM): one transaction per batch.
        self.running_reports = Batcher(
            self.store.mark_running_many, name="running_reports", max_size=256, max_delay=0.005
        )

    async def drain(self) -> None:
        await self.heartbeats.drain()
        await self.running_reports.drain()

    async def ensure_agent_queue(self, host_id: str) -> None:
        """Declare ``agent.<id>`` the first time this process needs it (idempotent on the broker)."""
        if host_id in self.declared_queues:
            return
        queue = await self.broker.declare_queue(topology.agent_queue(host_id))
        await queue.bind(topology.AGENTS_EXCHANGE.name, routing_key=host_id)
        self.declared_queues.add(host_id)

    # -- agent.heartbeat ------------------------------------------------------------------------
    async def on_heartbeat(self, beat: AgentHeartbeat) -> None:
        age = time.time() - beat.sent_at.timestamp()
        if age > self.settings.agent_offline_timeout:
            log.warning("stale heartbeat ignored", host=beat.agent_id, age_seconds=round(age, 1))
            return
        await self.heartbeats.submit(beat)

    async def _fold_heartbeats(self, beats: list[AgentHeartbeat]) -> Sequence[None]:
        newest: dict[str, AgentHeartbeat] = {}
        for beat in beats:
            kept = newest.get(beat.agent_id)
            if kept is None or beat.sent_at >= kept.sent_at:
                newest[beat.agent_id] = beat
        rows = await self.store.upsert_hosts(list(newest.values()))
        for row in rows:
            if row.inserted:
                log.info("new host", host=row.host_id)
            await self.ensure_agent_queue(row.host_id)
        await self.snapshot.record_heartbeats(
            (_heartbeat_write(newest[row.host_id], row) for row in rows),
            bump_interval=self.settings.agent_offline_timeout / 3,
        )
        await self._delete_orphans(newest.values())
        return [None] * len(beats)

    async def _delete_orphans(self, beats: Iterable[AgentHeartbeat]) -> None:
        """A host cut off for longer than VMSCHED_AGENT_OFFLINE_TIMEOUT had its VMs failed (and maybe placed
        elsewhere) while its agent kept running them; back online, it would hold capacity vmsched
        counts as free. Its heartbeat lists its VMs: those PostgreSQL does not hold there are deleted
        (as a kubelet kills pods no longer bound to its node)."""
        reported = [(beat.agent_id, beat.vm_ids) for beat in beats if beat.vm_ids]
        for host_id, orphan in await self.store.orphans(reported):
            log.warning("agent runs a VM it should not; sending delete", host=host_id, vm_id=str(orphan.id))
            await send_command(self.broker, host_id, orphan.delete_command())

    # -- vm.assigned ----------------------------------------------------------------------------
    async def on_assigned(self, event: VmAssigned) -> None:
        with bound(vm_id=str(event.vm_id), host=event.hypervisor_id):
            await self.ensure_agent_queue(event.hypervisor_id)
            command = AgentCommand(
                action=CommandAction.CREATE,
                vm_id=event.vm_id,
                name=event.name,
                resources=event.resources,
                attempt=event.attempt,
            )
            await send_command(self.broker, event.hypervisor_id, command)
            log.info("create command sent", attempt=event.attempt)

    # -- vm.status ------------------------------------------------------------------------------
    async def on_status(self, report: VmStatusReport) -> None:
        with bound(vm_id=str(report.vm_id), host=report.agent_id, reported=report.status.value):
            if report.status is ReportedStatus.RUNNING:
                await self._running(report)
            elif report.status is ReportedStatus.FAILED:
                await self._settle(await self.store.mark_failed(report.vm_id, report.agent_id, report.message))
            else:
                change = await self.store.mark_deleted(report.vm_id, report.agent_id)
                await self._settle(change)
                if change is not None:
                    await self.publish_deleted(VmDeleted(vm_id=report.vm_id, hypervisor_id=report.agent_id))

    async def _running(self, report: VmStatusReport) -> None:
        vm = await self.running_reports.submit((report.vm_id, report.agent_id))
        if vm is None:
            log.info("VM running")
            return
        # The report did not apply. A VM this agent should not run (deleted meanwhile, or moved to
        # another host after a retry) would be an orphan holding real capacity: tell it to delete.
        if vm.status in ("deleting", "deleted", "failed", "unschedulable", "pending") or (
            vm.hypervisor_id != report.agent_id
        ):
            log.warning("agent runs a VM it should not; sending delete", status=vm.status)
            orphan = VmRow(
                id=vm.id,
                name=vm.name,
                status="deleting",
                hypervisor_id=report.agent_id,
                resources=vm.resources,
                labels=vm.labels,
                strategy=vm.strategy,
                exclude_hosts=vm.exclude_hosts,
                attempt=report.attempt or vm.attempt,
            )
            await send_command(self.broker, report.agent_id, orphan.delete_command())

    async def _settle(self, change: StatusChange | None) -> None:
        if change is None:
            log.info("status report changed nothing")
            return
        await self.snapshot.release(change.vm.id)
        log.info("VM settled", status=change.vm.status, released_from=change.released_from)
        if change.republish:
            await publish_rows(self.broker, self.store.engine, [change.vm])


def _heartbeat_write(beat: AgentHeartbeat, row: HostAllocation) -> HeartbeatWrite:
    return HeartbeatWrite(
        host_id=beat.agent_id,
        capacity=beat.capacity,
        cpu_ratio=beat.overcommit.cpu,
        memory_ratio=beat.overcommit.memory,
        labels=beat.labels,
        status=beat.status.value,
        heartbeat_at=time.time(),
        paused=row.paused,
        allocated=row.allocated,
        vm_count=row.vm_count,
    )
