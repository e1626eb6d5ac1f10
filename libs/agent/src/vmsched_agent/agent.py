"""The agent: heartbeats, commands from ``agent.<id>``, status reports on ``vm.status``.

The contract (docs/agent-sdk.md): commands arrive at least once, so they are carried out
idempotently on ``vm_id``; a command is acked only after its status report is confirmed by the
broker, so a crash re-delivers it rather than losing it; a body that cannot be decoded is
dead-lettered with the reason and the agent goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self
from uuid import UUID, uuid4

from aio_pika.abc import AbstractIncomingMessage
from faststream.rabbit import RabbitBroker
from opentelemetry import propagate, trace
from pydantic import ValidationError

from vmsched_agent.connection import AgentConnection, Consumer
from vmsched_agent.host_vms import HostVms, error_text
from vmsched_agent.hypervisor import ControlsPower, Hypervisor, MeasuresUsage, MigratesVms
from vmsched_amqp import topology
from vmsched_amqp.failures import poison_reason
from vmsched_contract.messages import (
    AgentCommand,
    AgentHeartbeat,
    Capability,
    CommandAction,
    HostStatus,
    Overcommit,
    ReportedStatus,
    Resources,
    Taint,
    Usage,
    VmStatusReport,
)
from vmsched_contract.storage import StoragePool
from vmsched_runtime.logs import bound, get_logger
from vmsched_runtime.settings import default_settings

log = get_logger(__name__)
tracer = trace.get_tracer("vmsched_agent")

# Seconds stop() gives each talk with the broker (cancelling the consumer, the last heartbeat).
STOP_STEP_TIMEOUT = 5.0

# Called once a command is carried out, before its report is published: anything the report causes
# (the gateway marking the VM deleted, a test reading the API) comes after the observer saw the
# command. A command delivered again (its report was not confirmed) is observed again.
CommandObserver = Callable[["Agent", AgentCommand, VmStatusReport], None]
# Called as soon as a command is decoded, with the wall-clock time (time.time()) it was taken off the
# queue: what a benchmark needs to time "command received on the agent's queue".
ReceiveObserver = Callable[["Agent", AgentCommand, float], None]


@dataclass
class AgentStats:
    """What an agent has done since it was made."""

    commands_received: Counter[CommandAction] = field(default_factory=Counter)
    reports_sent: Counter[ReportedStatus] = field(default_factory=Counter)
    dead_lettered: int = 0


class Agent:
    """One hypervisor host: announces itself, carries out commands, reports what became of them.

    Give it either ``amqp_url`` (default: the ``VMSCHED_AMQP_URL`` setting), a started or unstarted
    ``broker`` (e.g. from ``vmsched_amqp.broker.make_broker``) or an :class:`AgentConnection`
    shared with other agents. ``vm_ids`` are the VMs the host already runs when the agent starts
    (so that a re-delivered create is recognised after a restart). ``max_concurrent_commands``
    applies to the connection the agent makes; a shared connection has its own ``prefetch``.

    ``capabilities`` are what the heartbeats declare beyond create and delete; by default what the
    hypervisor implements: ``migrate`` for :class:`~vmsched_agent.MigratesVms`, ``power`` for
    :class:`~vmsched_agent.ControlsPower`. Declare fewer to keep vmsched from asking (a host without
    ``migrate`` is never a migration's source or target). ``stopped`` are the VMs among ``vm_ids``
    that are powered off when the agent starts. ``migration_uri``: where other hosts' hypervisors
    reach this one's for a live migration (the heartbeats announce it; the gateway hands it to a
    migration's source in its commands' ``migration.target_uri``). ``networks``: the networks the host
    reaches (a VM that needs one goes only to hosts whose heartbeats list it).
    """

    def __init__(
        self,
        agent_id: str,
        capacity: Resources,
        hypervisor: Hypervisor,
        *,
        amqp_url: str | None = None,
        broker: RabbitBroker | None = None,
        connection: AgentConnection | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        overcommit: Overcommit | None = None,
        vm_ids: Iterable[UUID] = (),
        stopped: Iterable[UUID] = (),
        capabilities: Iterable[Capability | str] | None = None,
        migration_uri: str | None = None,
        networks: Iterable[str] = (),
        storage_pools: Sequence[StoragePool] = (),
        heartbeat_interval: float | None = None,
        max_concurrent_commands: int = 4,
        queue_wait_timeout: float = 60.0,
        graceful_timeout: float = 30.0,
        observer: CommandObserver | None = None,
        on_receive: ReceiveObserver | None = None,
    ) -> None:
        if sum(option is not None for option in (amqp_url, broker, connection)) > 1:
            raise ValueError("give at most one of amqp_url, broker and connection")
        self._agent_id = agent_id
        # This agent's run, in its heartbeats: the gateway refuses a second process for the same host
        # id while this one is online, and takes this one's last heartbeat (leaving) as its goodbye.
        self._instance_id = uuid4().hex
        self.capacity = capacity
        self.hypervisor = hypervisor
        self.labels = dict(labels or {})
        self.taints = list(taints)
        self.overcommit = overcommit or Overcommit()
        self.heartbeat_interval = heartbeat_interval or default_settings().agent_heartbeat_interval
        self.queue_wait_timeout = queue_wait_timeout
        self.graceful_timeout = graceful_timeout
        self.stats = AgentStats()
        self._observer = observer
        self._on_receive = on_receive
        self.storage_pools: tuple[StoragePool, ...] = tuple(storage_pools)  # what its heartbeats list
        self.capabilities: tuple[str, ...] = tuple(
            sorted({str(c) for c in (implemented(hypervisor) if capabilities is None else capabilities)})
        )
        self._vms = HostVms(agent_id, hypervisor, self.capabilities, vm_ids, stopped)
        self.migration_uri = migration_uri
        self.networks: tuple[str, ...] = tuple(sorted(set(networks)))
        self._draining = False
        self._usage: Usage | None = None
        self._usage_failing = False
        self._started = False
        self._accepting = False  # commands are carried out (not handed back) while set
        self._consumer: Consumer | None = None
        self._in_flight: set[asyncio.Task[object]] = set()
        self.heartbeat()  # validates the id, labels and capacity now rather than at start

        self._owns_connection = connection is None
        if connection is not None:
            self.connection = connection
        elif broker is not None:
            self.connection = AgentConnection(broker, prefetch=max_concurrent_commands)
        else:
            url = amqp_url or str(default_settings().amqp_url)
            self.connection = AgentConnection.to(url, prefetch=max_concurrent_commands)

    # -- state ---------------------------------------------------------------------------------
    @property
    def agent_id(self) -> str:
        return self._agent_id

    @property
    def instance_id(self) -> str:
        """This agent's run (new for every :class:`Agent`, so for every process start)."""
        return self._instance_id

    @property
    def vm_ids(self) -> frozenset[UUID]:
        """The VMs this host runs, as its heartbeats report them."""
        return frozenset(self._vms.running)

    def runs(self, vm_id: UUID) -> bool:
        return vm_id in self._vms.running

    def is_stopped(self, vm_id: UUID) -> bool:
        return vm_id in self._vms.stopped

    def can(self, capability: Capability) -> bool:
        return capability.value in self.capabilities

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def consuming(self) -> bool:
        """Whether this process takes the host's commands (not while another process holds them)."""
        return self._consumer is not None and self._consumer.taking_commands

    def set_draining(self, draining: bool) -> None:
        """Ask the scheduler for no new VMs (``draining``) or for VMs again; heartbeats at once."""
        if draining != self._draining:
            self._draining = draining
            self.connection.heartbeats.send_soon(self.agent_id)

    def report_usage(self, usage: Usage | None) -> None:
        """What the host measurably uses now (cores busy, memory in use): every heartbeat from now on
        carries it, until the next call. None: back to the hypervisor's own :meth:`MeasuresUsage.usage`
        if it has one, else no usage. Does not send a heartbeat of its own: usage changes all the
        time, and the next heartbeat (within ``heartbeat_interval``) takes it."""
        self._usage = usage

    def usage(self) -> Usage | None:
        """The usage the next heartbeat carries: the last :meth:`report_usage`, else the hypervisor's
        measurement (when it implements :class:`MeasuresUsage`), else None."""
        if self._usage is not None or not isinstance(self.hypervisor, MeasuresUsage):
            return self._usage
        try:
            measured = self.hypervisor.usage()
        except Exception as error:
            # A failing measurement must not stop the heartbeats (the host would go offline).
            if not self._usage_failing:
                log.warning("usage not measured", host=self.agent_id, error=error_text(error))
            self._usage_failing = True
            return None
        self._usage_failing = False
        return measured

    def heartbeat(self, status: HostStatus | None = None, *, leaving: bool = False) -> AgentHeartbeat:
        """The heartbeat this agent would send now (``leaving``: its last, as it stops)."""
        if status is None:
            status = HostStatus.DRAINING if self._draining else HostStatus.ONLINE
        return AgentHeartbeat(
            agent_id=self.agent_id,
            capacity=self.capacity,
            labels=self.labels,
            taints=self.taints,
            status=status,
            vm_ids=list(self._vms.running),
            overcommit=self.overcommit,
            usage=self.usage(),
            instance_id=self._instance_id,
            leaving=leaving,
            capabilities=list(self.capabilities),
            migration_uri=self.migration_uri,
            networks=list(self.networks),
            storage_pools=list(self.storage_pools),
        )

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Heartbeat, wait until the gateway has declared ``agent.<id>``, then take commands.

        Raises :class:`~vmsched_agent.AgentQueueMissing` if the queue does not appear within
        ``queue_wait_timeout`` seconds.
        """
        if self._started:
            return
        self._started = True
        try:
            if self._owns_connection:
                await self.connection.open()
            self.connection.heartbeats.add(self, self.heartbeat_interval)
            self._accepting = True
            self._consumer = await self.connection.consume(
                self.agent_id, self._on_message, queue_wait_timeout=self.queue_wait_timeout
            )
        except BaseException:
            self._started = self._accepting = False
            self.connection.heartbeats.remove(self.agent_id)
            if self._owns_connection:
                await self.connection.close()
            raise
        log.debug("agent taking commands", host=self.agent_id)

    async def stop(self, *, announce_draining: bool = True) -> None:
        """Stop taking commands, let those in flight finish (up to ``graceful_timeout`` seconds;
        the rest are re-delivered), send a last heartbeat saying ``draining`` and ``leaving`` (the
        host id is free at once for the next agent process), close."""
        if not self._started:
            return
        self._started = self._accepting = False
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                async with asyncio.timeout(STOP_STEP_TIMEOUT):  # the broker may be unreachable
                    await consumer.cancel()
            except Exception as error:  # the channel went away: nothing more will be delivered
                log.debug("consumer cancel failed", host=self.agent_id, error=repr(error))
        if self._in_flight:
            _, late = await asyncio.wait(set(self._in_flight), timeout=self.graceful_timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        self.connection.heartbeats.remove(self.agent_id)
        if announce_draining and self.connection.is_open:
            try:
                async with asyncio.timeout(STOP_STEP_TIMEOUT):
                    await self.connection.publish_heartbeat(self.heartbeat(HostStatus.DRAINING, leaving=True))
            except Exception as error:
                log.debug("last heartbeat not sent", host=self.agent_id, error=repr(error))
        if self._owns_connection:
            await self.connection.close()

    async def run(self) -> None:
        """The main of an agent process: start, serve until SIGINT or SIGTERM, stop."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        for signum in signals:
            loop.add_signal_handler(signum, stop.set)
        try:
            async with self:
                await stop.wait()
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- commands ------------------------------------------------------------------------------
    async def carry_out(self, command: AgentCommand) -> VmStatusReport:
        """Do what ``command`` asks, at most once per VM, and say how it ended.

        A create for a VM this host runs reports ``running`` again; a delete for a VM it does not
        run reports ``deleted``; neither calls the hypervisor. A hypervisor error is reported as
        ``failed`` with the error's text, never raised.
        """
        self.stats.commands_received[command.action] += 1
        report = await self._vms.carry_out(command)
        self.stats.reports_sent[report.status] += 1
        return report

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        if not self._accepting:
            # Delivered while stopping, after the in-flight commands were counted: hand it back.
            await message.nack(requeue=True)
            return
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
        try:
            await self._process(message)
        except Exception:
            log.exception("command not processed; it will be delivered again", host=self.agent_id)
            with contextlib.suppress(Exception):
                await message.nack(requeue=True)
        finally:
            if task is not None:
                self._in_flight.discard(task)

    async def _process(self, message: AbstractIncomingMessage) -> None:
        received_at = time.time()
        try:
            command = AgentCommand.model_validate_json(message.body)
        except ValidationError as error:
            # Wrong, not unlucky: it would fail the same way every time it came back.
            reason = poison_reason(error) or str(error)
            await self.connection.dead_letter(message, self.agent_id, reason)
            self.stats.dead_lettered += 1
            await message.ack()
            return
        if self._on_receive is not None:
            self._on_receive(self, command, received_at)
        queue = topology.agent_queue_name(self.agent_id)
        context = propagate.extract(_text_headers(message.headers))
        with (
            tracer.start_as_current_span(f"{queue} process", context=context, kind=trace.SpanKind.CONSUMER),
            bound(
                host=self.agent_id,
                vm_id=str(command.vm_id),
                action=command.action.value,
                message_id=message.message_id,
            ),
        ):
            report = await self.carry_out(command)
            if self._observer is not None:
                self._observer(self, command, report)
            await self.connection.publish_status(report)
            log.debug("command done", status=report.status.value, attempt=command.attempt)
        await message.ack()


def implemented(hypervisor: object) -> list[Capability]:
    """The capabilities ``hypervisor`` implements (its methods, by the protocols' names)."""
    found = []
    if isinstance(hypervisor, MigratesVms):
        found.append(Capability.MIGRATE)
    if isinstance(hypervisor, ControlsPower):
        found.append(Capability.POWER)
    return found


def _text_headers(headers: Mapping[str, object] | None) -> dict[str, str]:
    carrier: dict[str, str] = {}
    for key, value in (headers or {}).items():
        if isinstance(value, bytes):
            carrier[key] = value.decode(errors="replace")
        elif isinstance(value, str):
            carrier[key] = value
    return carrier
