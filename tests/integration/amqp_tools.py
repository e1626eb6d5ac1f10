"""Raw broker access for tests: publish anything, read a queue, wait for a message."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aio_pika
from aio_pika.abc import AbstractIncomingMessage


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
