"""Raw broker access for tests: publish anything, read a queue, wait for a message."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable

import aio_pika
import aiormq
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

from tests.servers import Servers


async def publish_raw(amqp_url: str, exchange: str, routing_key: str, body: bytes, **properties: object) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        target = await channel.get_exchange(exchange, ensure=True)
        await target.publish(aio_pika.Message(body=body, **properties), routing_key=routing_key)  # type: ignore[arg-type]


async def wait_for_message(
    amqp_url: str,
    queue: str,
    predicate: Callable[[AbstractIncomingMessage], bool],
    timeout: float = 30.0,
) -> AbstractIncomingMessage:
    """Get messages from ``queue`` (acking them) until one satisfies ``predicate``."""
    deadline = time.monotonic() + timeout
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        source = await channel.get_queue(queue, ensure=True)
        while time.monotonic() < deadline:
            message = await source.get(fail=False)
            if message is None:
                await asyncio.sleep(0.05)
                continue
            await message.ack()
            if predicate(message):
                return message
    raise TimeoutError(f"no matching message on {queue} within {timeout}s")


class Tap:
    """A queue of the test's own (exclusive, gone with the connection) bound to ``exchange`` with
    ``routing_keys``: every message routed there is kept, whoever else reads the same messages."""

    def __init__(self, amqp_url: str, exchange: str, *routing_keys: str) -> None:
        self.amqp_url = amqp_url
        self.exchange = exchange
        self.routing_keys = routing_keys
        self.messages: list[AbstractIncomingMessage] = []
        self._arrived = asyncio.Event()
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None

    async def __aenter__(self) -> Tap:
        self._connection = await aio_pika.connect_robust(self.amqp_url)
        channel = await self._connection.channel()
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        for key in self.routing_keys:
            await queue.bind(self.exchange, routing_key=key)
        await queue.consume(self._keep, no_ack=True)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._connection is not None:
            await self._connection.close()

    async def _keep(self, message: AbstractIncomingMessage) -> None:
        self.messages.append(message)
        self._arrived.set()

    async def wait(
        self, predicate: Callable[[AbstractIncomingMessage], bool], timeout: float = 30.0
    ) -> AbstractIncomingMessage:
        """The first message kept (before or after the call) that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            self._arrived.clear()  # before looking: one that arrives meanwhile wakes the wait below
            found = next((message for message in self.messages if predicate(message)), None)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching message on {self.exchange} {self.routing_keys} within {timeout}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)


async def queue_exists(amqp_url: str, name: str) -> bool:
    """Whether ``name`` exists (a passive declare on a connection of its own)."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        try:
            await channel.declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        return True


async def queue_type(amqp_url: str, name: str) -> str:
    """``quorum`` or ``classic``: RabbitMQ refuses a quorum declaration of a classic queue."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        try:
            await channel.declare_queue(name, durable=True, passive=False, arguments={"x-queue-type": "quorum"})
        except aiormq.exceptions.ChannelPreconditionFailed:
            return "classic"
        return "quorum"


async def drop_connection(connection: AbstractRobustConnection, timeout: float = 15.0) -> None:
    """Close ``connection``'s socket as a broker node going away does, and return once aio-pika has
    reconnected and restored what it restores (its reconnect callbacks run last)."""
    transport = connection.transport
    assert transport is not None, "the connection is not connected"
    reconnected = asyncio.Event()

    def on_reconnect(*_: object) -> None:
        reconnected.set()

    connection.reconnect_callbacks.add(on_reconnect)
    try:
        await transport.connection.close(ConnectionError("test: the connection is lost"))
        await asyncio.wait_for(reconnected.wait(), timeout)
    finally:
        connection.reconnect_callbacks.discard(on_reconnect)


@contextlib.asynccontextmanager
async def fresh_vhost(servers: Servers) -> AsyncIterator[str]:
    """The URL of a virtual host of its own, removed afterwards."""
    vhost = f"vmsched-test-{uuid.uuid4().hex[:10]}"
    servers.broker.add_vhost(vhost, "guest")
    try:
        yield servers.amqp_url.rsplit("/", 1)[0] + "/" + vhost
    finally:
        servers.broker.delete_vhost(vhost)
