"""The RabbitMQ broker every service builds, and what every consumer shares.

- A poison message (undecodable JSON, a body that fails validation) is published to ``vmsched.dlx``
  with the reason in a header and acked, so the consumer goes on with the rest.
- A transient failure (a server unreachable) re-runs the handler with backoff for a while; handlers
  are idempotent, so running one twice is safe. If it keeps failing the message is nacked and comes
  back; the quorum queue's delivery limit dead-letters it after ``topology.DEFAULT_DELIVERY_LIMIT`` (5)
  deliveries. Which error is which: :mod:`vmsched_amqp.failures`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import aiormq
from faststream import BaseMiddleware
from faststream.message import StreamMessage
from faststream.rabbit import RabbitBroker, RabbitQueue

from vmsched_amqp import topology
from vmsched_amqp.channels import plain_channel
from vmsched_amqp.dead_letters import declare_dead_letter_queue
from vmsched_amqp.failures import TRANSIENT_RETRY_DELAYS, is_transient, poison_reason
from vmsched_amqp.nodes import NodeRotatingConnection, node_urls
from vmsched_runtime.logs import bound, get_logger
from vmsched_runtime.metrics import DEAD_LETTERED, TRANSIENT_RETRIES
from vmsched_runtime.settings import Settings

log = get_logger(__name__)


class MessageLogContext(BaseMiddleware):
    """Binds the message's id (and routing key) for every line its handling logs; handlers add
    vm_id and host once they know them. Placed inside the telemetry middleware, so that the
    consume span, and with it trace_id, is current as well."""

    async def consume_scope(self, call_next: Callable[[Any], Awaitable[Any]], msg: StreamMessage[Any]) -> Any:
        raw = msg.raw_message
        with bound(message_id=msg.message_id, routing_key=getattr(raw, "routing_key", None)):
            return await call_next(msg)


def dead_letter_middleware(broker_ref: Callable[[], RabbitBroker]) -> type[BaseMiddleware]:
    class DeadLetterMiddleware(BaseMiddleware):
        async def consume_scope(self, call_next: Callable[[Any], Awaitable[Any]], msg: StreamMessage[Any]) -> Any:
            raw = msg.raw_message
            queue = _queue_of(msg)
            for attempt, delay in enumerate((*TRANSIENT_RETRY_DELAYS, None)):
                try:
                    return await call_next(msg)
                except Exception as error:
                    reason = poison_reason(error)
                    if reason is not None:
                        await dead_letter(broker_ref(), raw, queue, reason)
                        return None
                    if delay is None or not is_transient(error):
                        raise
                    TRANSIENT_RETRIES.labels(queue).inc()
                    log.warning("transient error, retrying", queue=queue, attempt=attempt + 1, error=repr(error))
                    await asyncio.sleep(delay)
            return None  # unreachable: the last iteration returns or raises

    return DeadLetterMiddleware


def _queue_of(msg: StreamMessage[Any]) -> str:
    raw = msg.raw_message
    if isinstance(raw, aio_pika.IncomingMessage):
        consumer_tag = raw.consumer_tag or ""
        return str(getattr(raw, "routing_key", "") or consumer_tag)
    return "unknown"


async def dead_letter(broker: RabbitBroker, raw: Any, queue: str, reason: str) -> None:
    """Send a copy of ``raw`` to the dead-letter exchange with the reason, under its routing key."""
    headers = dict(getattr(raw, "headers", None) or {})
    headers[topology.DEAD_LETTER_REASON_HEADER] = reason[:1000]
    headers[topology.DEAD_LETTER_QUEUE_HEADER] = queue
    await broker.publish(
        bytes(getattr(raw, "body", b"")),
        exchange=topology.DEAD_LETTER_EXCHANGE,
        routing_key=str(getattr(raw, "routing_key", "") or "unknown"),
        headers=headers,
        content_type=getattr(raw, "content_type", None),
        message_id=getattr(raw, "message_id", None),
        persist=True,
    )
    DEAD_LETTERED.labels(queue).inc()
    log.error("message dead-lettered", queue=queue, reason=reason, message_id=getattr(raw, "message_id", None))


def make_broker(settings: Settings, *, prefetch: int = 32, middlewares: tuple[Any, ...] = ()) -> RabbitBroker:
    """A broker with publisher confirms, bounded prefetch, trace context in the headers, the
    message's ids bound for its log lines, and the dead-letter middleware."""
    from faststream.rabbit import Channel
    from faststream.rabbit.opentelemetry import RabbitTelemetryMiddleware

    holder: list[RabbitBroker] = []
    nodes = node_urls(settings.amqp_url)
    broker = RabbitBroker(
        nodes[0],
        default_channel=Channel(prefetch_count=prefetch, publisher_confirms=True),
        # The first is outermost: one consume span covers every transient retry, and the log
        # context sees that span. The tracer provider is looked up when a span starts, so a
        # broker made before setup_tracing still traces.
        middlewares=(
            RabbitTelemetryMiddleware(),
            MessageLogContext,
            *middlewares,
            dead_letter_middleware(lambda: holder[0]),
        ),
        graceful_timeout=30.0,
        reconnect_interval=1.0,
        logger=get_logger("faststream"),
        # FastStream's "Received"/"Processed" line per message is logged before any middleware runs,
        # so without trace_id; at thousands of messages a second it is debugging detail.
        log_level=logging.DEBUG,
    )
    if len(nodes) > 1:
        # FastStream passes these to aio_pika.connect_robust, which takes the connection's class.
        broker._connection_kwargs["connection_class"] = functools.partial(NodeRotatingConnection, nodes=nodes)
        # Fail fast would give up when the first node tried is down; with several, try the others.
        broker._connection_kwargs["fail_fast"] = False
    holder.append(broker)
    return broker


async def declare_topology(broker: RabbitBroker) -> None:
    """Exchanges, the services' queues with their bindings, and the dead-letter queue; idempotent,
    every service calls it on start. The consumers' queues are declared by every service, not only
    by their consumer: a ``vm.create`` published before any scheduler ever started must find its
    queue, or the exchange drops it. Every queue declared here is a quorum queue (but an old classic
    dead-letter queue, see dead_letters.py): a reconnecting connection declares them again, and a
    quorum queue can be declared on any node of a cluster, also while one is down."""
    for exchange in (topology.EXCHANGE, topology.AGENTS_EXCHANGE, topology.DEAD_LETTER_EXCHANGE):
        await broker.declare_exchange(exchange)
    connection = await broker.connect()
    for disposable in topology.DISPOSABLE_QUEUES:
        await _replace_if_declared_otherwise(connection, disposable)
    for queue in topology.CONSUMER_QUEUES:
        declared = await broker.declare_queue(queue)
        await declared.bind(topology.EXCHANGE.name, routing_key=queue.routing())
    await declare_dead_letter_queue(broker)


async def declare_event_stream(broker: RabbitBroker) -> None:
    """The stream of VM events GET /v1/events reads (``topology.EVENTS_STREAM``), bound to the
    ``vmsched`` exchange; idempotent. Replicated like a quorum queue: declarable on any node."""
    stream = topology.EVENTS_STREAM
    declared = await broker.declare_queue(stream)
    await declared.bind(topology.EXCHANGE.name, routing_key=stream.routing())


async def _replace_if_declared_otherwise(connection: aio_pika.abc.AbstractConnection, queue: RabbitQueue) -> None:
    """Delete ``queue`` if it exists with other arguments (declared by an older version): RabbitMQ
    refuses to declare it again otherwise. Only for queues whose messages may be lost. On a channel
    of its own, since a refused declare closes the channel."""
    channel = await plain_channel(connection)
    try:
        await channel.declare_queue(queue.name, durable=queue.durable, arguments=dict(queue.arguments or {}))
    except aiormq.exceptions.ChannelPreconditionFailed as error:
        log.warning("queue declared with other arguments by an older version; replacing it", queue=queue.name)
        log.debug("declare refused", error=str(error))
        channel = await plain_channel(connection)
        await channel.queue_delete(queue.name)
    finally:
        if not channel.is_closed:
            await channel.close()


async def ready_messages(broker: RabbitBroker, queue: RabbitQueue) -> int | None:
    """How many messages wait in ``queue`` for a consumer (delivered, unacked ones not counted);
    None when the broker cannot be asked. Resend sweeps ask it first: while a queue has a backlog,
    the message they would send again is most likely still in it, and a copy only lengthens it."""
    try:
        declared = await broker.declare_queue(queue)
        result = await declared.declare()  # a fresh declare-ok: the count as of now
    except Exception as error:
        log.debug("queue depth unknown", queue=queue.name, error=repr(error))
        return None
    return int(result.message_count or 0)
