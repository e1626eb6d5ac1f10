"""One RabbitMQ connection shared by any number of agents: one for a real hypervisor, thousands for
the simulator.

The connection belongs to a FastStream ``RabbitBroker`` (the one every vmsched service builds with
``make_broker``); the agent side opens its own channels on it:

- a ``probe`` channel only for the passive declare that asks whether ``agent.<id>`` exists yet.
  RabbitMQ answers "no" by closing the channel, so no consumer may live on it.
- ``consumer`` channels ("lanes"), each holding the consumers of many agent queues. aio-pika
  reopens them after a reconnect, but does not declare the agent queues again nor resume their
  consumers: an agent queue is a classic queue on one node of a cluster, and while that node is
  down RabbitMQ refuses its declaration, which would fail the whole reconnection and stop the
  heartbeats of every agent on the connection. The connection resumes each consumer itself once its
  queue answers (:meth:`AgentConnection._keep_consuming`).
- a ``status`` channel with publisher confirms that raises when a message is returned
  unroutable, so a status counts as sent only once a queue holds it.
- a ``heartbeat`` channel without confirms: a lost heartbeat is replaced by the next one.

Each agent consumes its queue as an *exclusive* consumer: one host, one agent process. A second
process started with a host id already consumed (a copied config, a cloned VM image) takes no
command: it finds the queue held (its passive declare counts the consumers; RabbitMQ refuses an
exclusive consume when two race) and waits, heartbeating, until the holder's connection is gone. A
clean stop cancels the consumer, so its successor takes over at once; a crashed process's connection
is closed by its kernel (or, for a host that froze, by RabbitMQ after two missed AMQP heartbeats),
and the successor takes over then. Its heartbeats meanwhile are the gateway's to refuse
(``agent.conflict``, vmsched_gateway/instances.py). Nothing about the queue changes (exclusivity is
the consumer's, not the queue's), so queues declared by older versions need no move.

Heartbeats and status reports carry the AMQP ``user_id`` property: the connection's user, which
RabbitMQ checks, so the gateway knows which host's broker user sent them (docs/security.md).

Consumers are plain aio-pika consumers rather than FastStream subscribers: starting 1,000
FastStream subscribers takes about 3 times longer (each builds its own handler model), and a
simulated fleet starts 10,000 of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Awaitable, Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractConnection,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
    DeliveryMode,
)
from faststream.rabbit import RabbitBroker
from opentelemetry import propagate, trace

from vmsched_agent.heartbeats import HeartbeatScheduler
from vmsched_amqp import topology
from vmsched_amqp.agent_identity import DEFAULT_VHOST, agent_username
from vmsched_amqp.broker import dead_letter, make_broker
from vmsched_contract.messages import AgentHeartbeat, VmStatusReport, status_message_id
from vmsched_runtime.logs import get_logger
from vmsched_runtime.settings import Settings

log = get_logger(__name__)
tracer = trace.get_tracer("vmsched_agent")

# Named as FastStream names its publish spans ("<exchange>.<routing key> publish").
STATUS_PUBLISH_SPAN = f"{topology.EXCHANGE.name}.{topology.VM_STATUS} publish"

JSON = "application/json"
OnMessage = Callable[[AbstractIncomingMessage], Awaitable[None]]

# Seconds between passive declares while an agent waits for the gateway to declare its queue.
QUEUE_WAIT_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
QUEUE_WAIT_MAX_DELAY = 2.0
# Seconds between attempts to deliver a status report that did not reach a queue.
STATUS_RETRY_DELAYS = (0.1, 0.25, 0.5, 1.0, 2.0)
STATUS_RETRY_MAX_DELAY = 5.0
# Seconds to wait for aio-pika to reopen the probe channel after RabbitMQ closed it.
PROBE_REOPEN_TIMEOUT = 5.0
# Seconds between looks for consumers to resume (a reconnection or the broker's cancel wakes it sooner),
# and between attempts to resume one whose queue does not answer.
CONSUMER_CHECK_INTERVAL = 1.0
RESUME_DELAYS = (0.5, 1.0, 2.0, 4.0)
RESUME_MAX_DELAY = 5.0
# Seconds between looks at a queue another agent process consumes.
HOLDER_CHECK_INTERVAL = 1.0


class AgentQueueMissing(TimeoutError):
    """The gateway did not declare ``agent.<id>`` in time (it declares it on the first heartbeat)."""


def _delays(first: tuple[float, ...], then: float) -> Iterator[float]:
    return itertools.chain(first, itertools.repeat(then))


@dataclass(eq=False)
class Consumer:
    """An agent's subscription to its queue, kept by the :class:`AgentConnection` that made it:
    resumed after a reconnection, or after the broker cancelled it (the queue deleted, or its node
    down), once the queue answers again."""

    queue_name: str
    on_message: OnMessage
    lane: AbstractRobustChannel
    queue: AbstractQueue | None = None
    consumer_tag: str | None = None
    cancelled: bool = False
    # Another process consumes the queue: this one waits (and is resumed) until it is gone.
    held_elsewhere: bool = False
    resume_delays: Iterator[float] = field(default_factory=lambda: _delays(RESUME_DELAYS, RESUME_MAX_DELAY))
    resume_at: float = 0.0

    async def cancel(self) -> None:
        """Stop deliveries (what was delivered already still runs); the connection stops keeping it."""
        self.cancelled = True
        if self.queue is not None and self.consumer_tag is not None and not self.lane.is_closed:
            await self.queue.cancel(self.consumer_tag)

    @property
    def taking_commands(self) -> bool:
        return not self.cancelled and not self.held_elsewhere and self.consumer_tag is not None

    async def start(self) -> None:
        """Consume the queue on the lane, exclusively. robust=False: a reconnecting connection
        declares nothing of it again (see the module's docstring); the connection resumes it
        instead. Raises ``aiormq.exceptions.ChannelAccessRefused`` (and the lane is reopened) when
        another consumer took the queue first."""
        queue = await self.lane.declare_queue(self.queue_name, passive=True, robust=False)
        self.consumer_tag = await queue.consume(self.on_message, exclusive=True, robust=False)
        self.queue = queue
        self.held_elsewhere = False
        self.resume_delays = _delays(RESUME_DELAYS, RESUME_MAX_DELAY)

    def put_off(self, now: float) -> None:
        self.resume_at = now + next(self.resume_delays)


@dataclass
class _QueueProbe:
    """Asks whether a queue exists with a passive declare, one question at a time, on a channel
    of its own: RabbitMQ answers "no" by closing the channel."""

    channel: AbstractRobustChannel
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    reopened: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.channel.reopen_callbacks.add(self._on_reopened)

    def _on_reopened(self, *_: object) -> None:
        self.reopened.set()

    async def consumers(self, name: str, *, deadline: float) -> int | None:
        """How many consumers queue ``name`` has; None when it does not exist, or when the
        deadline (event loop time) passes while other questions are asked first."""
        try:
            async with asyncio.timeout_at(deadline):
                await self.lock.acquire()
        except TimeoutError:
            return None
        try:
            self.reopened.clear()
            try:
                # robust=False: the channel must not declare anything again when it reopens.
                queue = await self.channel.declare_queue(name, passive=True, robust=False)
            except aiormq.exceptions.ChannelNotFoundEntity:
                # aio-pika reopens the closed channel by itself; wait for that. Reopening it here as
                # well would leak a channel per "no" (RabbitMQ allows 2,047 per connection), and a
                # second probe channel closing meanwhile can make aiormq reuse a channel number
                # before the broker freed it, which closes the whole connection: hence one channel
                # and one question at a time.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.reopened.wait(), PROBE_REOPEN_TIMEOUT)
                return None
            except (aiormq.exceptions.AMQPError, ConnectionError) as error:
                # The connection is down or recovering: the next question waits for it to be back.
                log.debug("queue probe failed", queue=name, error=repr(error))
                return None
            return int(queue.declaration_result.consumer_count or 0)
        finally:
            self.lock.release()


class AgentConnection:
    """Channels, consumers and publishing for agents sharing one broker connection.

    ``lanes`` is how many consumer channels the agents are spread over: setting up consumers goes
    this many at a time. ``prefetch`` is how many commands each agent is given at once (RabbitMQ
    applies it per consumer).
    """

    def __init__(self, broker: RabbitBroker, *, lanes: int = 1, prefetch: int = 4, owns_broker: bool = False) -> None:
        if lanes < 1 or prefetch < 1:
            raise ValueError("lanes and prefetch must be at least 1")
        self.broker = broker
        self.heartbeats = HeartbeatScheduler(self.publish_heartbeat)
        self._lane_count = lanes
        self._prefetch = prefetch
        self._owns_broker = owns_broker
        self._lanes: list[AbstractRobustChannel] = []
        self._probe: _QueueProbe | None = None
        self._next_lane = itertools.count()
        self._status_channel: AbstractRobustChannel | None = None
        self._heartbeat_channel: AbstractRobustChannel | None = None
        self._user_id: str | None = None
        self._vhost = DEFAULT_VHOST
        self._connection: AbstractConnection | None = None
        self._consumers: set[Consumer] = set()
        self._keeper: asyncio.Task[None] | None = None
        self._wake_keeper = asyncio.Event()
        self._opened = False

    @classmethod
    def to(cls, amqp_url: str, *, lanes: int = 1, prefetch: int = 4) -> AgentConnection:
        """A connection with its own broker (closed by :meth:`close`)."""
        broker = make_broker(Settings(amqp_url=amqp_url))
        return cls(broker, lanes=lanes, prefetch=prefetch, owns_broker=True)

    @property
    def is_open(self) -> bool:
        return self._opened

    @property
    def user_id(self) -> str | None:
        """The broker user this connection logged in as (known once open): the ``user_id`` of what it
        publishes."""
        return self._user_id

    async def open(self) -> None:
        """Connect (if the broker is not connected yet), open the channels, start heartbeats."""
        if self._opened:
            return
        connection = await self.broker.connect()
        self._user_id = connection.url.user or None
        self._vhost = connection.url.path[1:] or DEFAULT_VHOST  # as aio-pika reads it
        self._status_channel = await _robust(connection.channel(publisher_confirms=True, on_return_raises=True))
        self._heartbeat_channel = await _robust(connection.channel(publisher_confirms=False))
        self._probe = _QueueProbe(await _robust(connection.channel(publisher_confirms=False)))
        for _ in range(self._lane_count):
            consumer = await _robust(connection.channel(publisher_confirms=False))
            await consumer.set_qos(prefetch_count=self._prefetch)
            consumer.reopen_callbacks.add(self._wake)
            self._lanes.append(consumer)
        # A RobustConnection's (FastStream always makes one): after a reconnection, resume at once.
        if isinstance(connection, AbstractRobustConnection):
            connection.reconnect_callbacks.add(self._wake)
        self._connection = connection
        self._keeper = asyncio.create_task(self._keep_consuming(), name="vmsched-agent-consumers")
        self.heartbeats.start()
        self._opened = True

    async def close(self) -> None:
        """Stop heartbeats, close the channels, and the broker if this connection made it."""
        if not self._opened:
            return
        self._opened = False
        await self.heartbeats.stop()
        if isinstance(self._connection, AbstractRobustConnection):
            self._connection.reconnect_callbacks.discard(self._wake)
        self._connection = None
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
            self._keeper = None
        self._consumers.clear()
        channels = [self._status_channel, self._heartbeat_channel, *self._lanes]
        if self._probe is not None:
            channels.append(self._probe.channel)
        for channel in channels:
            if channel is not None and not channel.is_closed:
                try:
                    await channel.close()
                except Exception as error:  # closing anyway; nothing to do about it
                    log.debug("channel close failed", error=repr(error))
        self._lanes.clear()
        self._probe = None
        if self._owns_broker:
            await self.broker.stop()

    async def consume(self, host_id: str, on_message: OnMessage, *, queue_wait_timeout: float) -> Consumer:
        """Wait until ``agent.<host_id>`` exists (the gateway declares it when it first sees the
        host's heartbeat), then consume it. Raises :class:`AgentQueueMissing` when it still does
        not exist after ``queue_wait_timeout`` seconds."""
        if self._probe is None:
            raise RuntimeError("AgentConnection is not open; call open() first")
        lane = self._lanes[next(self._next_lane) % len(self._lanes)]
        name = topology.agent_queue_name(host_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + queue_wait_timeout
        for delay in _delays(QUEUE_WAIT_DELAYS, QUEUE_WAIT_MAX_DELAY):
            consumers = await self._probe.consumers(name, deadline=deadline)
            if consumers is not None:
                break
            if loop.time() + delay > deadline:
                raise AgentQueueMissing(
                    f"queue {name} still does not exist after {queue_wait_timeout:g} s; "
                    "the gateway declares it when it takes the host's heartbeat: is it running, and does it take "
                    f"this agent's word (with VMSCHED_AGENT_AUTH=required, only as broker user "
                    f"{agent_username(host_id, self._vhost)!r}: vmsched-gateway enroll-agent {host_id})?"
                )
            await asyncio.sleep(delay)
        consumer = Consumer(name, on_message, lane)
        self._consumers.add(consumer)
        await self._take(consumer, loop.time(), consumers)
        return consumer

    async def _take(self, consumer: Consumer, now: float, consumers: int | None = None) -> None:
        """Start ``consumer`` unless its queue is missing or another process consumes it (as
        ``consumers`` says when just asked, else asked here); then put it off for the keeper to try
        again."""
        probe = self._probe
        if consumers is None and probe is not None:
            consumers = await probe.consumers(consumer.queue_name, deadline=now + PROBE_REOPEN_TIMEOUT)
        if consumers is None:
            consumer.put_off(now)
            return
        if consumers > 0:
            self._wait_for_holder(consumer, now)
            return
        try:
            # The probe just found it, so this passive declare cannot close the shared lane; only a
            # consumer that took the queue in between can (the lane is reopened, and its consumers
            # resumed by the keeper).
            await consumer.start()
        except aiormq.exceptions.ChannelAccessRefused:
            self._wait_for_holder(consumer, now)

    def _wait_for_holder(self, consumer: Consumer, now: float) -> None:
        if not consumer.held_elsewhere:
            log.warning(
                "another agent process takes this host's commands; waiting for it to stop (one host, one agent)",
                queue=consumer.queue_name,
            )
        consumer.held_elsewhere = True
        # Not backed off: the holder's successor should take over within a second of it leaving.
        consumer.resume_at = now + HOLDER_CHECK_INTERVAL

    def _wake(self, *_: object) -> None:
        self._wake_keeper.set()

    async def _keep_consuming(self) -> None:
        """Resume every consumer the broker no longer delivers to, once its queue answers (asked on
        the probe channel first: a passive declare refused on a lane would close every consumer
        on it)."""
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_keeper.wait(), CONSUMER_CHECK_INTERVAL)
            self._wake_keeper.clear()
            active: dict[AbstractRobustChannel, Container[str]] = {}
            for consumer in list(self._consumers):
                if consumer.cancelled:
                    self._consumers.discard(consumer)
                    continue
                if consumer.lane not in active:
                    active[consumer.lane] = await _consumer_tags(consumer.lane)
                if loop.time() < consumer.resume_at or consumer.consumer_tag in active[consumer.lane]:
                    continue
                await self._resume(consumer, loop.time())

    async def _resume(self, consumer: Consumer, now: float) -> None:
        try:
            await self._take(consumer, now)
        except Exception as error:  # the connection went again, or the queue with it: next round
            log.debug("consumer not resumed yet", queue=consumer.queue_name, error=repr(error))
            consumer.put_off(now)
            return
        if consumer.cancelled:  # cancelled while resuming: the broker must not keep delivering
            with contextlib.suppress(Exception):
                await consumer.cancel()
            return
        if not consumer.taking_commands:
            return
        log.info("agent taking commands again", queue=consumer.queue_name)

    async def publish_status(self, report: VmStatusReport) -> None:
        """Publish ``report`` on ``vm.status``, persistent, and return once the broker has confirmed
        it and routed it to a queue. Retries (with backoff) until then: a status must not be lost,
        and the command it answers is acked only afterwards."""
        channel = self._require(self._status_channel)
        with tracer.start_as_current_span(STATUS_PUBLISH_SPAN, kind=trace.SpanKind.PRODUCER) as span:
            span.set_attribute("messaging.message.id", status_message_id(report))
            await self._deliver_status(channel, report)

    async def _deliver_status(self, channel: AbstractRobustChannel, report: VmStatusReport) -> None:
        headers: dict[str, Any] = {}
        propagate.inject(headers)  # the trace of the command goes on in whoever reads the status
        for attempt, delay in enumerate(_delays(STATUS_RETRY_DELAYS, STATUS_RETRY_MAX_DELAY), start=1):
            message = aio_pika.Message(
                report.model_dump_json().encode(),
                content_type=JSON,
                delivery_mode=DeliveryMode.PERSISTENT,
                message_id=status_message_id(report),
                headers=headers,
                user_id=self._user_id,
            )
            try:
                # A closed channel is reopened by aio-pika itself (never here: see _Lane); publish
                # waits for that, or fails and is retried.
                exchange = await channel.get_exchange(topology.EXCHANGE.name, ensure=False)
                await exchange.publish(message, routing_key=topology.VM_STATUS, mandatory=True)
                return
            except Exception as error:
                log.warning(
                    "status report not delivered; retrying",
                    vm_id=str(report.vm_id),
                    status=report.status.value,
                    attempt=attempt,
                    error=_describe(error),
                )
                await asyncio.sleep(delay)

    async def publish_heartbeat(self, heartbeat: AgentHeartbeat) -> None:
        """Publish on ``agent.heartbeat``, not persistent, without waiting for a confirm."""
        channel = self._require(self._heartbeat_channel)
        exchange = await channel.get_exchange(topology.EXCHANGE.name, ensure=False)
        message = aio_pika.Message(
            heartbeat.model_dump_json().encode(),
            content_type=JSON,
            delivery_mode=DeliveryMode.NOT_PERSISTENT,
            message_id=uuid.uuid4().hex,
            user_id=self._user_id,
        )
        await exchange.publish(message, routing_key=topology.AGENT_HEARTBEAT, mandatory=False)

    async def dead_letter(self, message: AbstractIncomingMessage, host_id: str, reason: str) -> None:
        """Copy an unusable command to ``vmsched.dlx`` with the reason in a header (the caller acks)."""
        await dead_letter(self.broker, message, topology.agent_queue_name(host_id), reason)

    @staticmethod
    def _require(channel: AbstractRobustChannel | None) -> AbstractRobustChannel:
        if channel is None:
            raise RuntimeError("AgentConnection is not open; call open() first")
        return channel


async def _consumer_tags(lane: AbstractRobustChannel) -> Container[str]:
    """The consumers the broker delivers to on ``lane``: a reconnection or the broker's cancel
    removes theirs (waits while the connection is down)."""
    if lane.is_closed:
        return ()
    underlay = cast("aiormq.Channel", await lane.get_underlay_channel())
    return underlay.consumers.keys()


async def _robust(opening: Awaitable[Any]) -> AbstractRobustChannel:
    channel = await opening
    if not isinstance(channel, AbstractRobustChannel):  # a RobustConnection makes robust channels
        raise TypeError(f"expected a robust channel, got {type(channel).__name__}")
    return channel


def _describe(error: BaseException) -> str:
    if isinstance(error, aiormq.exceptions.PublishError):
        return "returned unroutable: no queue is bound to vm.status (is the gateway's queue declared?)"
    return repr(error)
