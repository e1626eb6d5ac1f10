"""Whether a service's broker is ready for it (its part of ``/readyz``, :mod:`vmsched_runtime.readiness`):
the connection is up and answers a question, and every consumer of the service is subscribed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aio_pika.abc import AbstractChannel
from faststream.rabbit import RabbitBroker
from faststream.rabbit.subscriber.usecase import RabbitSubscriber

from vmsched_amqp import topology
from vmsched_amqp.channels import plain_channel
from vmsched_amqp.lean_consumer import LeanConsumer
from vmsched_runtime.readiness import Check


class BrokerQuestion:
    """Asks the broker a question (a passive declare of the exchange, on a channel of its own).

    A connection that looks open may lead nowhere: a partition that drops its packets goes unnoticed
    until its AMQP heartbeats time out, minutes later. Only an answer tells."""

    def __init__(self, broker: RabbitBroker) -> None:
        self.broker = broker
        self._channel: AbstractChannel | None = None
        self._asking = asyncio.Lock()

    async def answers(self, timeout: float) -> bool:
        """Whether the broker answers within ``timeout`` seconds. One question at a time: while one
        is unanswered, the broker does not answer."""
        if self._asking.locked():
            return False
        async with self._asking:
            try:
                async with asyncio.timeout(timeout):
                    if self._channel is None or self._channel.is_closed:
                        self._channel = await plain_channel(await self.broker.connect())
                    await self._channel.get_exchange(topology.EXCHANGE.name, ensure=True)
            except Exception:  # timed out, refused, disconnected: the next question opens a new channel
                self._channel = None
                return False
            return True


def connected(broker: RabbitBroker) -> bool:
    """Whether the broker's connection is up now (not closed, not reconnecting); says nothing of a
    connection whose packets are dropped (:class:`BrokerQuestion` does)."""
    connection: Any = broker._connection  # FastStream keeps it; None before the first connect
    return connection is not None and not connection.is_closed and connection.connected.is_set()


# Seconds the broker has to answer: within the readiness check's own timeout, so that the answer
# says which of "down" and "silent" it was.
QUESTION_TIMEOUT = 1.0


def broker_check(broker: RabbitBroker, timeout: float = QUESTION_TIMEOUT) -> Check:
    """The broker's readiness: its connection up, and a question answered within ``timeout`` s."""
    question = BrokerQuestion(broker)

    async def check() -> str | None:
        if not connected(broker):
            return "connection down (reconnecting)"
        if not await question.answers(timeout):
            return f"connected, but no answer to a question within {timeout:g} s"
        return None

    return check


def consumers_check(broker: RabbitBroker, lean: Sequence[LeanConsumer[Any]] = ()) -> Check:
    """Every consumer of the service subscribed: the broker's FastStream subscribers, and ``lean``."""

    async def check() -> str | None:
        idle = [_queue_of(subscriber) for subscriber in broker.subscribers if not subscriber.running]
        idle += [consumer.queue.name for consumer in lean if not consumer.consuming]
        return f"not consuming: {', '.join(sorted(idle))}" if idle else None

    return check


def _queue_of(subscriber: object) -> str:
    return subscriber.queue.name if isinstance(subscriber, RabbitSubscriber) else repr(subscriber)
