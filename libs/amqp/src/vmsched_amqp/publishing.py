"""The one way a vmsched service sends a message.

Every message is one the event contract (:mod:`vmsched_amqp.events`, the AsyncAPI document)
declares: persistent, confirmed by the broker, JSON, a message id made from what it carries (a
message sent again for the same VMs has the same id), and the trace context in its headers.

Events go through FastStream's publishers (its telemetry middleware makes the producer span).
Agent commands, one per VM and the most numerous message vmsched sends, go straight through an
aio-pika channel with confirms, with a producer span of the same name: FastStream's publish path cost
the gateway a fifth of its CPU (docs/performance.md). They are not persistent: RabbitMQ writing each
one to disk in one of thousands of host queues cost it 0.7 ms of CPU a message against 0.2 ms
(bench/broker_floor.py's method). A command lost with a broker restart is sent again: the gateway
resends the create of a VM still ``scheduled`` after VMSCHED_RESEND_STALE_AFTER, the API the delete
of one still ``deleting``, and agents carry out a repeated command once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import aio_pika
from aio_pika.abc import AbstractChannel
from faststream.rabbit import RabbitBroker
from opentelemetry import propagate, trace
from pydantic import BaseModel

from vmsched_amqp import events, topology
from vmsched_amqp.flow import publishers_blocked
from vmsched_amqp.readiness import BrokerQuestion
from vmsched_contract.messages import MAX_VMS_PER_MESSAGE, AgentCommand, VmCreate, VmToPlace, command_message_id

if TYPE_CHECKING:
    from faststream.rabbit.publisher import RabbitPublisher


T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def chunks(items: Sequence[T], size: int = MAX_VMS_PER_MESSAGE) -> list[Sequence[T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


tracer = trace.get_tracer("vmsched_amqp.publishing")
JSON = "application/json"


class Publisher:
    """Sends the events of the contract (:data:`vmsched_amqp.events.EVENTS`): each with the
    persistence and the message id its row says. Declaring an event's publisher on the broker is
    what puts it in the AsyncAPI document; a service declares only those it sends."""

    def __init__(self, broker: RabbitBroker) -> None:
        self.broker = broker
        self._publishers: dict[str, RabbitPublisher] = {}
        self._commands: AbstractChannel | None = None
        self._opening = asyncio.Lock()
        self._question = BrokerQuestion(broker)

    async def blocked(self) -> bool:
        """Whether the broker blocks this publisher now (a memory or disk alarm): a publish would
        wait for the alarm to clear (:mod:`vmsched_amqp.flow`)."""
        return publishers_blocked(await self.broker.connect())

    async def answers(self, timeout: float) -> bool:
        """Whether the broker answers a question within ``timeout`` seconds
        (:class:`vmsched_amqp.readiness.BrokerQuestion`)."""
        return await self._question.answers(timeout)

    async def publish(self, event: events.Event[M], message: M) -> None:
        """``message`` as ``event``, returned once the broker confirmed it."""
        publisher = self._publishers.get(event.title)
        if publisher is None:
            publisher = self._publishers[event.title] = event.declare(self.broker)
        message_id = None if event.message_id is None else event.message_id(message)
        await publisher.publish(message, message_id=message_id)

    async def vm_create(self, vms: Sequence[VmToPlace]) -> None:
        """``vm.create`` for these VMs: one message per MAX_VMS_PER_MESSAGE, sent at once."""
        await asyncio.gather(*(self.publish(events.VM_CREATE, VmCreate(vms=list(part))) for part in chunks(vms)))

    async def command(self, host_id: str, command: AgentCommand) -> None:
        """A command on ``agent.<host_id>`` (through the ``vmsched.agents`` exchange), returned once
        the broker has confirmed it (in the host's queue, not on disk: see above)."""
        exchange = await (await self._command_channel()).get_exchange(topology.AGENTS_EXCHANGE.name, ensure=False)
        with tracer.start_as_current_span(
            f"{topology.AGENTS_EXCHANGE.name}.{host_id} publish", kind=trace.SpanKind.PRODUCER
        ):
            headers: dict[str, object] = {}
            propagate.inject(headers)
            message = aio_pika.Message(
                command.model_dump_json().encode(),
                content_type=JSON,
                delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
                message_id=command_message_id(command),
                headers=headers,  # type: ignore[arg-type]
            )
            await exchange.publish(message, routing_key=host_id)

    async def _command_channel(self) -> AbstractChannel:
        """A channel with publisher confirms on the broker's (robust) connection, opened once."""
        async with self._opening:
            if self._commands is None:
                connection = await self.broker.connect()
                self._commands = await connection.channel(publisher_confirms=True)
            return self._commands
