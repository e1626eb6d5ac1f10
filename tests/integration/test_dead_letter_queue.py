"""``vmsched.dead-letters`` is a quorum queue; a classic one an older version left is kept, with its
messages, until ``python -m vmsched_amqp.dead_letters`` moves it (vmsched_amqp/dead_letters.py)."""

from __future__ import annotations

import aio_pika

from tests.integration.amqp_tools import fresh_vhost, publish_raw, queue_exists, queue_type
from tests.servers import Servers
from vmsched_amqp import topology
from vmsched_amqp.broker import declare_topology, make_broker
from vmsched_amqp.dead_letters import MOVING_QUEUE, move_to_quorum
from vmsched_runtime.settings import Settings

DLQ = topology.DEAD_LETTER_QUEUE.name


async def start_a_service(url: str) -> None:
    """What every service does on start, then stops."""
    broker = make_broker(Settings(amqp_url=url))
    try:
        await broker.connect()
        await declare_topology(broker)
    finally:
        await broker.stop()


async def leave_a_classic_dead_letter_queue(url: str, messages: int) -> None:
    """As an older version left it: classic, bound to the dead-letter exchange, holding ``messages``."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            topology.DEAD_LETTER_EXCHANGE.name, aio_pika.ExchangeType.TOPIC, durable=True
        )
        queue = await channel.declare_queue(DLQ, durable=True)
        await queue.bind(exchange, routing_key="#")
    for n in range(messages):
        await dead_letter(url, f"old-{n}")


async def dead_letter(url: str, message_id: str) -> None:
    await publish_raw(
        url,
        topology.DEAD_LETTER_EXCHANGE.name,
        "vm.create",
        b'{"broken": true}',
        message_id=message_id,
        headers={topology.DEAD_LETTER_REASON_HEADER: "invalid message"},
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )


async def message_ids(url: str, queue: str) -> list[str]:
    """The ids of every message in ``queue``, which keeps them (got, then put back)."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        source = await channel.declare_queue(queue, passive=True)
        held = []
        while (message := await source.get(no_ack=False, fail=False)) is not None:
            held.append(message)
        ids = [str(message.message_id) for message in held]
        for message in held:
            await message.nack(requeue=True)
        return ids


async def test_a_fresh_installation_declares_a_quorum_dead_letter_queue(servers: Servers) -> None:
    async with fresh_vhost(servers) as url:
        await start_a_service(url)
        assert await queue_type(url, DLQ) == "quorum"
        await dead_letter(url, "fresh")
        assert await message_ids(url, DLQ) == ["fresh"]


async def test_a_classic_dead_letter_queue_with_messages_is_kept_and_still_receives_dead_letters(
    servers: Servers,
) -> None:
    async with fresh_vhost(servers) as url:
        await leave_a_classic_dead_letter_queue(url, messages=3)
        await start_a_service(url)  # does not fail on the classic queue, and deletes nothing
        await dead_letter(url, "after-upgrade")
        assert await queue_type(url, DLQ) == "classic"
        assert sorted(await message_ids(url, DLQ)) == ["after-upgrade", "old-0", "old-1", "old-2"]


async def test_the_move_keeps_every_message_and_leaves_a_quorum_queue_bound_to_the_dead_letter_exchange(
    servers: Servers,
) -> None:
    async with fresh_vhost(servers) as url:
        await leave_a_classic_dead_letter_queue(url, messages=5)
        connection = await aio_pika.connect(url)
        async with connection:
            assert await move_to_quorum(connection) == 5
            assert await move_to_quorum(connection) == 0  # again: nothing left to do, nothing broken
        assert await queue_type(url, DLQ) == "quorum"
        assert not await queue_exists(url, MOVING_QUEUE)
        await dead_letter(url, "after-move")
        assert sorted(await message_ids(url, DLQ)) == ["after-move", "old-0", "old-1", "old-2", "old-3", "old-4"]
        await start_a_service(url)
        assert await queue_type(url, DLQ) == "quorum"
