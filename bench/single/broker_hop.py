"""The broker's raw hop flat out, measured in the same run: the ceiling RabbitMQ alone sets."""

from __future__ import annotations

import asyncio
import os
import time

import aio_pika

from bench.single.plan import HOP_MESSAGES, HOP_WINDOW


async def raw_hop(amqp_url: str, messages: int = HOP_MESSAGES) -> float:
    """Messages/s through one quorum queue, confirmed on publish and acked on consume, flat out."""
    connection = await aio_pika.connect(amqp_url)
    try:
        publishing = await connection.channel(publisher_confirms=True)
        consuming = await connection.channel()
        await consuming.set_qos(prefetch_count=HOP_WINDOW)
        name = f"bench.hop.{os.getpid()}"
        queue = await consuming.declare_queue(name, durable=True, arguments={"x-queue-type": "quorum"})
        payload = b"x" * 256  # about a one-VM vm.create
        done = asyncio.Event()
        received = 0

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received >= messages:
                done.set()

        await queue.consume(on_message)
        window = asyncio.Semaphore(HOP_WINDOW)

        async def publish(n: int) -> None:
            async with window:
                await publishing.default_exchange.publish(
                    aio_pika.Message(payload, delivery_mode=aio_pika.DeliveryMode.PERSISTENT, message_id=str(n)),
                    routing_key=name,
                )

        began = time.monotonic()
        await asyncio.gather(*(publish(n) for n in range(messages)))
        await asyncio.wait_for(done.wait(), 120)
        rate = messages / (time.monotonic() - began)
        await queue.delete(if_unused=False, if_empty=False)
        return rate
    finally:
        await connection.close()
