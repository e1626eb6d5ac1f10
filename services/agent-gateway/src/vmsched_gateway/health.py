"""The gateway's periodic duties (seed 002, Orchard's health checks, with Nova's and Kubernetes'
patience about hosts that only look dead):

- none of the others while the gateway cannot hear the broker (:mod:`vmsched_gateway.hearing`): cut
  from it, it hears no heartbeat and can announce nothing; hosts are not marked offline until it has
  listened for an offline timeout again, and nothing is failed for a lost timeout (:class:`FailureGrace`);
- hosts silent for AGENT_OFFLINE_TIMEOUT become offline, in PostgreSQL and in the snapshot, and
  their VMs ``unknown``: presumed running, their capacity kept, nothing failed or deleted. A host
  that heartbeats again settles them from the VMs its heartbeat lists (heartbeats.py);
- hosts silent for AGENT_LOST_TIMEOUT are handled as fencing says (vmsched_gateway.fencing): their
  VMs fail (their capacity given back) and their restart policy applies once the host is fenced, or
  at once when VMSCHED_RESTART_UNFENCED allows it with no fence command; not while no agent at all is
  heard from, nor while the check itself fails, nor for a lost timeout after either (see
  :class:`FailureGrace`);
- the VMs of fenced hosts fail at once, whatever the grace (an operator or the fence command said
  the host is down);
- failed VMs that ran, with ``restart_policy: on_failure``, go back to pending after RESTART_DELAY,
  the host they failed on excluded for EXCLUDE_FOR, and are published for placement again;
- scheduled VMs whose agent has not answered for RESEND_STALE_AFTER get their create command again
  (the agent is idempotent on vm_id), its queue declared first: the command may have been
  dead-lettered on the way, lost with a broker restart, or dropped because its queue's node was down
  (agent_queues.py); not while the gateway's own assignment queue has a backlog (the command may not
  be sent yet: a copy would only add to the load that made it late).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from faststream.rabbit import RabbitBroker

from vmsched_amqp import events, topology
from vmsched_amqp.broker import ready_messages
from vmsched_amqp.publishing import Publisher
from vmsched_amqp.readiness import connected
from vmsched_contract.messages import CommandAction, HostStatus, VmDeleted
from vmsched_contract.status import VmStatus
from vmsched_domain.vm_changes import Change
from vmsched_gateway.agent_queues import AgentQueues
from vmsched_gateway.command_ratios import CommandRatios
from vmsched_gateway.fencing import LostHosts
from vmsched_gateway.hearing import BrokerHearing, FoldProgress
from vmsched_gateway.host_store import HostStore
from vmsched_gateway.metrics import BROKER_UNHEARD, HOSTS_SILENT, VMS_LOST
from vmsched_gateway.sweep_store import SweepStore
from vmsched_pg.outbox import publish_rows
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_runtime.settings import Settings

log = get_logger(__name__)


@dataclass
class FailureGrace:
    """When this gateway may fail the VMs of lost hosts.

    Not in the first AGENT_LOST_TIMEOUT after it starts, nor in the first one after a spell in which
    no agent at all was heard from: either way it has not been listening long enough to tell a dead
    agent from one whose heartbeats could not reach it (Nomad resets its heartbeat timers after a
    leader election for the same reason). Without this, the first agent back after a broker outage
    would end the cut-off and every agent still reconnecting would lose its VMs.
    """

    timeout: float
    until: float

    @classmethod
    def starting(cls, now: float, timeout: float) -> FailureGrace:
        return cls(timeout=timeout, until=now + timeout)

    def allows_failing(self, now: float) -> bool:
        return now >= self.until

    def cut_off(self, now: float) -> None:
        self.until = now + self.timeout


@dataclass
class HealthCheck:
    hosts: HostStore
    sweeps: SweepStore
    snapshot: Snapshot
    broker: RabbitBroker
    publisher: Publisher
    settings: Settings
    grace: FailureGrace
    queues: AgentQueues
    lost: LostHosts
    hearing: BrokerHearing
    folding: FoldProgress = field(default_factory=FoldProgress)  # the heartbeat fold's (HeartbeatFold.progress)
    _deaf: bool = field(default=False, init=False)
    _behind: bool = field(default=False, init=False)

    async def once(self) -> None:
        now = time.monotonic()
        settings = self.settings
        if self._cut_from_broker(now):
            return
        self._check_folding(now)
        offline_after = self.hearing.offline_after(now)
        if offline_after is None:  # listening again for too short a while: as blind as when deaf
            self.grace.cut_off(now)
        else:
            silence = await self.hosts.silence(offline_after)
            for host_id in silence.offline:
                HOSTS_SILENT.inc()
                log.warning("host offline: no heartbeat; its VMs are unknown", host=host_id)
                await self.snapshot.set_host_fields(host_id, {"status": HostStatus.OFFLINE.value})
            if not silence.heard_any:
                if self.grace.allows_failing(now):
                    log.error("no agent heard from at all: assuming this gateway is cut off; no VM is failed")
                self.grace.cut_off(now)
            elif self.grace.allows_failing(now):
                await self._settle(
                    await self.lost.handle(settings.agent_lost_timeout, exclude_for=settings.exclude_for), "lost"
                )
        await self._settle(await self.hosts.fail_fenced(exclude_for=settings.exclude_for), "failed: host fenced")
        await self._settle(await self.sweeps.restart_due(settings.restart_delay), "restarted")
        backlog = await ready_messages(self.broker, topology.GATEWAY_ASSIGNED_QUEUE)
        if backlog:
            # Behind on assignments: a stale VM's command may not even have been sent yet.
            log.debug("not resending create commands while assignments wait", waiting=backlog)
            return
        for vm in await self.sweeps.touch_stale_scheduled(settings.resend_stale_after):
            if vm.hypervisor_id is None:
                continue
            log.warning("create command unanswered; sending it again", vm_id=str(vm.id), host=vm.hypervisor_id)
            await self.queues.ensure(vm.hypervisor_id)
            command = await CommandRatios(self.snapshot).stamp(vm.hypervisor_id, vm.command(CommandAction.CREATE))
            await self.publisher.command(vm.hypervisor_id, command)

    async def watch_broker(self, interval: float = 1.0) -> None:
        """Tell when the gateway stops and starts hearing the broker, even while a check is stuck on
        the cut itself (a question to a broker whose packets are dropped waits for minutes)."""
        while True:
            self._cut_from_broker(time.monotonic())
            await asyncio.sleep(interval)

    def _cut_from_broker(self, now: float) -> bool:
        """Whether the gateway cannot hear the broker now (which cuts its :class:`FailureGrace` off);
        says so once per spell."""
        deaf = self.hearing.deaf(now, connected=connected(self.broker))
        if deaf:
            self.grace.cut_off(now)
        if deaf != self._deaf:
            self._deaf = deaf
            BROKER_UNHEARD.set(int(deaf))
            if deaf:
                log.error(
                    "cut from the broker: no heartbeat and not its own probe heard; no host is marked offline, "
                    "no VM failed, until it hears again"
                )
            else:
                log.warning("hearing the broker again; hosts are marked offline again after an offline timeout")
        return deaf

    def _check_folding(self, now: float) -> None:
        """Heartbeats heard and not folded for a while (the fold waits on a silent server) leave the
        hosts' rows stale: held as when blind, no host taken for offline; says so once per spell."""
        behind = self.folding.behind(now, self.hearing.deaf_after)
        if behind:
            self.hearing.blind(now)
            self.grace.cut_off(now)
        if behind != self._behind:
            self._behind = behind
            if behind:
                log.error(
                    "heartbeats wait to be folded: no host is marked offline, no VM failed, until they are",
                    waiting=self.folding.waiting,
                )
            else:
                log.warning("heartbeats folded again; hosts are marked offline again after an offline timeout")

    async def _settle(self, changes: list[Change], what: str) -> None:
        if not changes:
            return
        for change in changes:
            log.warning(
                f"VM {what}",
                vm_id=str(change.after.id),
                host=change.before.hypervisor_id,
                status=change.after.status.value,
                reason=change.after.status_reason,
            )
        if what == "lost":
            VMS_LOST.inc(len(changes))
        released = [change.after.id for change in changes if change.released_from]
        if released:
            await self.snapshot.release_many(released)
        await publish_rows(self.publisher, self.hosts.engine, [change.after for change in changes])
        for change in changes:
            if change.after.status is VmStatus.DELETED:
                await self.publisher.publish(
                    events.VM_DELETED,
                    VmDeleted(
                        vm_id=change.after.id,
                        hypervisor_id=change.before.hypervisor_id,
                        project=change.after.project,
                    ),
                )

    async def forever(self, interval: float = 1.0) -> None:
        while True:
            try:
                await self.once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a server hiccup must not end the duty; the next round retries
                log.warning("host check failed", error=repr(error))
                # A gateway that cannot check (its PostgreSQL or Redis away) cannot fold heartbeats
                # either: once it can again, every host looks silent since the cut began, and the
                # first heartbeats folded would end a cut-off it never noticed. It is as blind as
                # when it hears no agent at all, and as deaf as when cut from the broker: no host is
                # taken for offline before the fleet has had an offline timeout to be folded again.
                now = time.monotonic()
                self.grace.cut_off(now)
                self.hearing.blind(now)
            await asyncio.sleep(interval)
