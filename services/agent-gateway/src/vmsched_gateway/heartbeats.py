"""Heartbeats, folded in batches: the hosts' rows in PostgreSQL, their snapshot hashes in Redis,
the VMs of a host that comes back after a silence, and the VMs an agent runs that vmsched does not
hold there. A heartbeat from an agent process that does not hold its host id is refused
(vmsched_gateway.instances): dead-lettered, counted, announced as ``agent.conflict``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vmsched_amqp import events
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import AgentConflict, AgentHeartbeat, HostStatus
from vmsched_gateway.hearing import FoldProgress
from vmsched_gateway.host_store import Folded, HostFacts, HostStore
from vmsched_gateway.identity import AgentRefused, MessageKind, Refusal, refuse
from vmsched_gateway.instances import ConflictNotices, Refused
from vmsched_gateway.metrics import VMS_RETURNED
from vmsched_gateway.orphans import Orphans
from vmsched_pg.outbox import publish_implied
from vmsched_redis.host_hash import HostWrite
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.batching import Batcher
from vmsched_runtime.logs import get_logger

log = get_logger("vmsched_gateway")

# Seconds a stopping gateway gives the queue declarations still to do.
DRAIN_DECLARING = 5.0


class QueueDeclarations(Protocol):
    """What the fold asks of the hosts' command queues (vmsched_gateway.agent_queues.AgentQueues)."""

    def known(self, host_id: str) -> bool: ...

    async def ensure_many(self, hosts: Mapping[str, bool]) -> None: ...


@dataclass
class HeartbeatFold:
    store: HostStore
    snapshot: Snapshot
    queues: QueueDeclarations
    orphans: Orphans
    publisher: Publisher
    offline_timeout: float
    conflicts: ConflictNotices = field(default_factory=lambda: ConflictNotices(time.monotonic))
    batches: Batcher[AgentHeartbeat, AgentRefused | None] = field(init=False)
    # Read by the health check: hosts whose heartbeats wait here are not silent (vmsched_gateway.hearing).
    progress: FoldProgress = field(default_factory=FoldProgress)
    # Hosts whose command queue is to be declared (True: again, a host new to PostgreSQL), and the
    # task declaring them, a batch at a time.
    _undeclared: dict[str, bool] = field(default_factory=dict, init=False)
    _declaring: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.batches = Batcher(self._fold, name="heartbeats", max_size=500, max_delay=0.05)

    async def on_heartbeat(self, beat: AgentHeartbeat) -> None:
        """Fold ``beat``; raises :class:`AgentRefused` (the consumer dead-letters it) when another
        agent process holds its host id."""
        age = time.time() - beat.sent_at.timestamp()
        if age > self.offline_timeout:
            log.warning("stale heartbeat ignored", host=beat.agent_id, age_seconds=round(age, 1))
            return
        self.progress.submitted(time.monotonic())
        try:
            refused = await self.batches.submit(beat)
        finally:
            self.progress.answered()
        if refused is not None:
            raise refused

    async def drain(self) -> None:
        await self.batches.drain()
        if self._declaring is not None:
            # A few seconds to finish (a new host's agent waits for its queue); the rest are declared
            # by the next process, or by the commands that need them.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._declaring, timeout=DRAIN_DECLARING)

    async def _fold(self, beats: list[AgentHeartbeat]) -> Sequence[AgentRefused | None]:
        try:
            folded = await self._write(beats)
        except Exception:
            self.progress.failed(time.monotonic())
            raise
        self.progress.folded(time.monotonic())
        newest = folded.accepted
        if folded.returned:
            for change in folded.returned:
                VMS_RETURNED.labels(change.after.status.value).inc()
                log.info(
                    "host back: VM settled",
                    host=change.before.hypervisor_id,
                    vm_id=str(change.after.id),
                    status=change.after.status.value,
                )
            released = [change.after.id for change in folded.returned if change.released_from]
            await self.snapshot.release_many(released)
            await publish_implied(self.publisher, [change.after for change in folded.returned])
        reported = [(beat.agent_id, beat.sent_at, beat.vm_ids) for beat in newest.values() if beat.vm_ids]
        fenced = {host.host_id for host in folded.hosts if host.fenced}
        for host_id, vm in await self.store.orphans(reported):
            await self.orphans.found(host_id, vm, fenced=host_id in fenced)
        refusals = {id(refused.beat): await self._conflict(refused) for refused in folded.refused}
        return [refusals.get(id(beat)) for beat in beats]

    async def _write(self, beats: list[AgentHeartbeat]) -> Folded:
        """The hosts' rows in PostgreSQL, then their snapshot in Redis."""
        folded = await self.store.fold_heartbeats(beats, takeover_after=self.offline_timeout)
        newest = folded.accepted
        for host in folded.hosts:
            if host.inserted:
                log.info("new host", host=host.host_id)
                # Perhaps a host an operator deleted, whose queue went with it: declared again.
                self._undeclared[host.host_id] = True
            elif not self.queues.known(host.host_id):
                self._undeclared.setdefault(host.host_id, False)
        self._declare_soon()
        await self.snapshot.record_heartbeats(
            [_host_write(newest[host.host_id], host) for host in folded.hosts],
            bump_interval=self.offline_timeout / 3,
        )
        return folded

    def _declare_soon(self) -> None:
        """Declare the hosts' command queues beside the folding, not in it: a gateway that starts
        declares every host's queue once (two round trips each), and a thousand of them in the fold
        held every heartbeat behind them for a minute, long enough for hundreds of hosts to be
        marked offline. Nothing waits for these: a command declares its queue first (relay.py),
        and an agent waits for its queue to exist."""
        if self._undeclared and (self._declaring is None or self._declaring.done()):
            self._declaring = asyncio.create_task(self._declare_all(), name="declare agent queues")

    async def _declare_all(self) -> None:
        while self._undeclared:
            hosts, self._undeclared = self._undeclared, {}
            await self.queues.ensure_many(hosts)

    async def _conflict(self, refused: Refused) -> AgentRefused:
        beat = refused.beat
        detail = (
            f"host {beat.agent_id} is held by agent instance {refused.held_by}, online; this heartbeat is from "
            f"instance {beat.instance_id}: another process with the same host id? (it is accepted once the holder "
            f"stops, or is silent for {self.offline_timeout:g} s)"
        )
        if self.conflicts.due(beat.agent_id, beat.instance_id):
            log.warning(
                "second agent process for a host refused",
                host=beat.agent_id,
                instance=beat.instance_id,
                held_by=refused.held_by,
            )
            event = AgentConflict(
                host_id=beat.agent_id, instance_id=beat.instance_id, held_by=refused.held_by, detail=detail
            )
            await self.publisher.publish(events.AGENT_CONFLICT, event)
        return refuse(MessageKind.HEARTBEAT, Refusal.INSTANCE_CONFLICT, detail)


def _host_write(beat: AgentHeartbeat, host: HostFacts) -> HostWrite:
    # Labels, taints and ratios as PostgreSQL made them of the beat: the operator's word wins.
    return HostWrite(
        host_id=beat.agent_id,
        capacity=beat.capacity,
        overcommit=host.overcommit,
        reserved=host.reserved,
        labels=host.labels,
        taints=host.taints,
        status=HostStatus.FENCED.value if host.fenced else beat.status.value,
        heartbeat_at=time.time(),
        paused=host.paused,
        allocated=host.allocated,
        vm_count=host.vm_count,
        usage=beat.usage,
        capabilities=beat.capabilities,
        networks=beat.networks,
        dedicated_to=host.dedicated_to,
        storage_pools=beat.storage_pools,
        pools_allocated=host.pools_allocated,
    )
