"""A plain aio-pika consumer for the queues where each message's cost matters: one per host per
heartbeat, one per VM per agent report.

Through FastStream's per-message pipeline (dependency injection, context scopes, the telemetry,
logging and dead-letter middlewares) a message cost the gateway about 2.8 ms of CPU, more than the
work it carried (docs/performance.md). This consumer keeps what those messages need and nothing
else: the same pydantic validation, poison messages dead-lettered with the reason (as are messages
an ``admit`` check refuses, before any work), transient
failures retried in place with the same backoff, the trace continued from the headers, and an ack
after the handler (or none, ``acks=False``, for messages the next one replaces).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, TypeVar

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue
from faststream.rabbit import RabbitBroker, RabbitQueue
from opentelemetry import propagate, trace
from pydantic import BaseModel, ValidationError

from vmsched_amqp import topology
from vmsched_amqp.broker import dead_letter
from vmsched_amqp.failures import TRANSIENT_RETRY_DELAYS, PoisonMessage, is_transient, poison_reason
from vmsched_runtime.logs import bound, get_logger
from vmsched_runtime.metrics import TRANSIENT_RETRIES

log = get_logger(__name__)
tracer = trace.get_tracer("vmsched_amqp.lean_consumer")

M = TypeVar("M", bound=BaseModel)
# Raises PoisonMessage for a message that must not be handled, given its AMQP user_id (the broker
# verifies it names the publishing user) and its body.
Admit = Callable[[str | None, M], None]


class LeanConsumer(Generic[M]):
    def __init__(
        self,
        broker: RabbitBroker,
        queue: RabbitQueue,
        model: type[M],
        handle: Callable[[M], Awaitable[None]],
        *,
        prefetch: int,
        acks: bool = True,
        admit: Admit[M] | None = None,
    ) -> None:
        self.broker = broker
        self.queue = queue
        self.model = model
        self.handle = handle
        self.prefetch = prefetch
        self.acks = acks
        self.admit = admit
        self._declared: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        self._span_name = f"{topology.EXCHANGE.name}.{queue.routing()} process"

    async def start(self) -> None:
        """Consume the queue (declared by ``declare_topology``) on a robust channel of the broker's
        connection: after a reconnect aio-pika declares it again and resumes."""
        connection = await self.broker.connect()
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=self.prefetch)
        queue_type = self.queue.arguments or {}
        self._declared = await channel.declare_queue(
            self.queue.name, durable=self.queue.durable, arguments=dict(queue_type)
        )
        self._consumer_tag = await self._declared.consume(self._on_message, no_ack=not self.acks)

    @property
    def consuming(self) -> bool:
        """Started and not stopped, on a channel that is open (a robust one reopens after a
        reconnection and consumes again)."""
        return self._consumer_tag is not None and self._declared is not None and not self._declared.channel.is_closed

    async def stop(self) -> None:
        if self._declared is None or self._declared.channel.is_closed:
            return
        if self._consumer_tag is not None:
            await self._declared.cancel(self._consumer_tag)
        await self._declared.channel.close()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            body = self.model.model_validate_json(message.body)
        except (ValidationError, ValueError) as error:
            reason = poison_reason(error) or f"invalid message: {error}"
            await dead_letter(self.broker, message, self.queue.name, reason)
            if self.acks:
                await message.ack()
            return
        if self.admit is not None:
            try:
                self.admit(message.user_id, body)
            except PoisonMessage as refused:
                await dead_letter(self.broker, message, self.queue.name, str(refused))
                if self.acks:
                    await message.ack()
                return
        with bound(message_id=message.message_id, routing_key=message.routing_key):
            if not message.headers:
                await self._handle(message, body)
                return
            parent = propagate.extract(_text_headers(message.headers))
            with tracer.start_as_current_span(self._span_name, context=parent, kind=trace.SpanKind.CONSUMER):
                await self._handle(message, body)

    async def _handle(self, message: AbstractIncomingMessage, body: M) -> None:
        for attempt, delay in enumerate((*TRANSIENT_RETRY_DELAYS, None)):
            try:
                await self.handle(body)
                break
            except Exception as error:
                reason = poison_reason(error)
                if reason is not None:
                    await dead_letter(self.broker, message, self.queue.name, reason)
                    break
                if not self.acks:  # nothing to give back: the next message replaces this one
                    log.warning("message dropped after an error", queue=self.queue.name, error=repr(error))
                    return
                if delay is None or not is_transient(error):
                    log.warning("handler failed; the message is given back", queue=self.queue.name, error=repr(error))
                    await message.nack(requeue=True)
                    return
                TRANSIENT_RETRIES.labels(self.queue.name).inc()
                log.warning("transient error, retrying", queue=self.queue.name, attempt=attempt + 1, error=repr(error))
                await asyncio.sleep(delay)
        if self.acks:
            await message.ack()


def _text_headers(headers: Mapping[str, object]) -> dict[str, str]:
    carrier: dict[str, str] = {}
    for key, value in headers.items():
        if isinstance(value, bytes):
            carrier[key] = value.decode(errors="replace")
        elif isinstance(value, str):
            carrier[key] = value
    return carrier
