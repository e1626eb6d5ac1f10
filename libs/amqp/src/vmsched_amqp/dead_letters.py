"""The dead-letter queue ``vmsched.dead-letters``: declared by every service, and moved from the
classic queue older versions declared to the quorum queue this one declares.

A classic queue lives on one node of a cluster: while that node is down, dead letters routed to it
are dropped, and a service that declares it again on reconnecting cannot reconnect. RabbitMQ cannot
change a queue's type, and the old queue may hold messages an operator has yet to read, so no
service deletes it. A service that finds it keeps it (declared once, on a channel no reconnection
restores) and says how to move it. The move, run once by an operator::

    python -m vmsched_amqp.dead_letters

1. declares the quorum queue ``vmsched.dead-letters.moving`` and binds it to ``vmsched.dlx``;
2. unbinds the classic queue: new dead letters now go to the moving queue alone;
3. moves every message of the classic queue to the moving queue (published with confirms, then
   acked) and deletes the classic queue once it is empty;
4. declares the quorum ``vmsched.dead-letters`` and binds it, then unbinds the moving queue (a dead
   letter arriving between the two lands in both: a copy, never a loss);
5. moves the moving queue's messages to ``vmsched.dead-letters`` and deletes the moving queue.

Each step can be run again, so after an interruption the same command finishes the move. Run one at
a time: two moves at once would pass messages back and forth between them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage
from faststream.rabbit import RabbitBroker

from vmsched_amqp import topology
from vmsched_amqp.channels import plain_channel
from vmsched_amqp.nodes import node_urls
from vmsched_runtime.logs import get_logger

if TYPE_CHECKING:
    from pamqp.common import FieldTable

log = get_logger(__name__)

MOVING_QUEUE = f"{topology.DEAD_LETTER_QUEUE.name}.moving"
DEAD_LETTER_KEY = "#"
QUORUM: FieldTable = {"x-queue-type": "quorum"}


async def declare_dead_letter_queue(broker: RabbitBroker) -> None:
    """Declare and bind the quorum dead-letter queue, or keep the classic one an older version left."""
    connection = await broker.connect()
    if await _is_classic(connection):
        log.warning(
            "vmsched.dead-letters is a classic queue left by an older version: kept; move it to a quorum "
            "queue with `python -m vmsched_amqp.dead_letters` (docs/deploy.md, upgrading)"
        )
        await _bind_once(connection, topology.DEAD_LETTER_QUEUE.name)
        return
    dead_letters = await broker.declare_queue(topology.DEAD_LETTER_QUEUE)
    await dead_letters.bind(topology.DEAD_LETTER_EXCHANGE.name, routing_key=DEAD_LETTER_KEY)


async def _is_classic(connection: AbstractConnection) -> bool:
    """Whether ``vmsched.dead-letters`` exists as another type than quorum (declares it quorum if
    absent). A classic one whose node is down counts too: RabbitMQ then answers NOT_FOUND."""
    channel = await plain_channel(connection)
    try:
        await channel.declare_queue(topology.DEAD_LETTER_QUEUE.name, durable=True, arguments=QUORUM)
    except (aiormq.exceptions.ChannelPreconditionFailed, aiormq.exceptions.ChannelNotFoundEntity):
        return True
    finally:
        if not channel.is_closed:
            await channel.close()
    return False


async def _bind_once(connection: AbstractConnection, queue: str) -> None:
    channel = await plain_channel(connection)
    try:
        await (await channel.get_underlay_channel()).queue_bind(
            queue, topology.DEAD_LETTER_EXCHANGE.name, routing_key=DEAD_LETTER_KEY
        )
    except aiormq.exceptions.AMQPError as error:  # its node is down: dead letters wait for it
        log.warning("the classic dead-letter queue cannot be bound now", error=str(error))
    finally:
        if not channel.is_closed:
            await channel.close()


async def move_to_quorum(connection: AbstractConnection) -> int:
    """The move described above; returns how many messages were moved out of the classic queue."""
    name = topology.DEAD_LETTER_QUEUE.name
    exchange = topology.DEAD_LETTER_EXCHANGE.name
    async with _channel(connection) as channel:
        await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        moving = await channel.declare_queue(MOVING_QUEUE, durable=True, arguments=QUORUM)
        await moving.bind(exchange, routing_key=DEAD_LETTER_KEY)
    moved = 0
    if await _is_classic(connection):
        # A channel of its own: RabbitMQ 3.10 remembers per channel what it knew of a queue by its
        # name, and a channel that used the classic queue publishing to the quorum one of the same
        # name crashes (and its connection with it).
        async with _channel(connection) as channel:
            classic = await channel.declare_queue(name, passive=True)
            await classic.unbind(exchange, routing_key=DEAD_LETTER_KEY)
            moved = await _move(channel, classic, MOVING_QUEUE)
            await classic.delete(if_unused=False, if_empty=True)
    async with _channel(connection) as channel:
        quorum = await channel.declare_queue(name, durable=True, arguments=QUORUM)
        await quorum.bind(exchange, routing_key=DEAD_LETTER_KEY)
        moving = await channel.declare_queue(MOVING_QUEUE, passive=True)
        await moving.unbind(exchange, routing_key=DEAD_LETTER_KEY)
        await _move(channel, moving, name)
        # Unbound, so nothing arrives any more; quorum queues take no if-empty delete: asked first.
        left = (await channel.declare_queue(MOVING_QUEUE, passive=True)).declaration_result.message_count
        if left:
            raise RuntimeError(f"{MOVING_QUEUE} still holds {left} messages; run the move again")
        await moving.delete(if_unused=False, if_empty=False)
    return moved


@contextlib.asynccontextmanager
async def _channel(connection: AbstractConnection) -> AsyncIterator[AbstractChannel]:
    channel = await plain_channel(connection, publisher_confirms=True)
    try:
        yield channel
    finally:
        if not channel.is_closed:
            await channel.close()


async def _move(channel: AbstractChannel, source: aio_pika.abc.AbstractQueue, target: str) -> int:
    """Every message of ``source`` published to queue ``target`` (confirmed), then acked."""
    moved = 0
    while True:
        message = await source.get(no_ack=False, fail=False)
        if message is None:
            return moved
        await channel.default_exchange.publish(_copy(message), routing_key=target)
        await message.ack()
        moved += 1


def _copy(message: AbstractIncomingMessage) -> aio_pika.Message:
    return aio_pika.Message(
        message.body,
        headers=dict(message.headers),
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        timestamp=message.timestamp,
        type=message.type,
        app_id=message.app_id,
    )


async def _run(amqp_url: str) -> int:
    connection = await aio_pika.connect(node_urls(amqp_url)[0])
    try:
        return await move_to_quorum(connection)
    finally:
        await connection.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m vmsched_amqp.dead_letters``: move a classic ``vmsched.dead-letters`` to a quorum queue."""
    from vmsched_runtime.settings import load_settings

    argparse.ArgumentParser(
        prog="python -m vmsched_amqp.dead_letters",
        description="Move the classic dead-letter queue an older vmsched declared to a quorum queue of the same "
        "name, keeping every message (idempotent; run one at a time). The broker comes from VMSCHED_AMQP_URL.",
    ).parse_args(argv)
    settings = load_settings("vmsched-dead-letters")
    moved = asyncio.run(_run(str(settings.amqp_url)))
    print(f"vmsched.dead-letters is a quorum queue; {moved} messages moved from the classic one", flush=True)


if __name__ == "__main__":
    main()
