"""The gateway's per-host queues are declared outside what a reconnection restores
(vmsched_gateway/agent_queues.py): a declaration RabbitMQ refuses (a queue whose node is down, here
one declared with other arguments) is no error and is asked again only after a while, and after a
reconnection each queue is declared again when next needed, not by the reconnection itself."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest
from faststream.rabbit import RabbitBroker

from tests.integration.amqp_tools import drop_connection, queue_exists
from tests.servers import Servers
from vmsched_amqp import topology
from vmsched_amqp.broker import declare_topology, make_broker
from vmsched_gateway.agent_queues import DECLARE_BATCH, AgentQueues
from vmsched_runtime.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def broker(servers: Servers) -> AsyncIterator[RabbitBroker]:
    """A broker of the test's own: the test drops its connection."""
    broker = make_broker(Settings(amqp_url=servers.amqp_url))
    await broker.connect()
    await declare_topology(broker)
    yield broker
    await broker.stop()


def new_host() -> str:
    return f"queues-{uuid.uuid4().hex[:10]}"


async def delete_queue(servers: Servers, host_id: str) -> None:
    connection = await aio_pika.connect(servers.amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(topology.agent_queue_name(host_id))


async def test_a_refused_declaration_is_no_error_and_is_asked_again_only_after_a_while(
    broker: RabbitBroker, servers: Servers
) -> None:
    refused, fine = new_host(), new_host()
    connection = await aio_pika.connect(servers.amqp_url)
    async with connection:  # declared otherwise (no dead-letter exchange): RabbitMQ refuses ours
        await (await connection.channel()).declare_queue(topology.agent_queue_name(refused), durable=True)
    clock = Clock()
    queues = AgentQueues(broker, retry_refused_after=5.0, clock=clock)

    assert not await queues.ensure(refused)
    assert await queues.ensure(fine)  # the refusal closed a channel, not the gateway's connection

    await delete_queue(servers, refused)  # now it could be declared, but it is not asked yet
    clock.now += 4.0
    assert not await queues.ensure(refused)
    assert not await queue_exists(servers.amqp_url, topology.agent_queue_name(refused))
    clock.now += 1.5
    assert await queues.ensure(refused)
    assert await queue_exists(servers.amqp_url, topology.agent_queue_name(refused))
    await delete_queue(servers, refused)
    await delete_queue(servers, fine)


async def test_a_reconnection_declares_no_agent_queue_again_and_the_next_use_does(
    broker: RabbitBroker, servers: Servers
) -> None:
    host_id = new_host()
    queues = AgentQueues(broker)
    assert await queues.ensure(host_id)
    await delete_queue(servers, host_id)  # as a broker rebuilt from scratch would have lost it

    await drop_connection(await broker.connect())

    assert not await queue_exists(servers.amqp_url, topology.agent_queue_name(host_id))
    assert await queues.ensure(host_id)  # declared again: the reconnection emptied the cache
    assert await queue_exists(servers.amqp_url, topology.agent_queue_name(host_id))
    await delete_queue(servers, host_id)


async def queued(servers: Servers, host_id: str) -> int:
    """Messages waiting in ``agent.<host_id>``."""
    connection = await aio_pika.connect(servers.amqp_url)
    async with connection:
        queue = await (await connection.channel()).declare_queue(topology.agent_queue_name(host_id), passive=True)
        return int(queue.declaration_result.message_count or 0)


async def test_many_queues_are_declared_and_bound_a_batch_per_round_trip(
    broker: RabbitBroker, servers: Servers
) -> None:
    hosts = [new_host() for _ in range(2 * DECLARE_BATCH + 7)]  # three batches, the last one short
    queues = AgentQueues(broker)
    await queues.ensure_many(dict.fromkeys(hosts, False))

    assert all(queues.known(host_id) for host_id in hosts)
    connection = await aio_pika.connect(servers.amqp_url)
    async with connection:  # each queue bound: a command routed by its host id lands in it
        channel = await connection.channel(publisher_confirms=True)
        agents = await channel.get_exchange(topology.AGENTS_EXCHANGE.name)
        for host_id in hosts:
            await agents.publish(aio_pika.Message(b"{}"), routing_key=host_id)
    assert [await queued(servers, host_id) for host_id in hosts] == [1] * len(hosts)
    for host_id in hosts:
        await delete_queue(servers, host_id)


async def test_a_batch_with_a_refused_queue_declares_the_others_and_knows_which_was_refused(
    broker: RabbitBroker, servers: Servers
) -> None:
    before, refused, after = new_host(), new_host(), new_host()
    connection = await aio_pika.connect(servers.amqp_url)
    async with connection:  # declared otherwise (no dead-letter exchange): RabbitMQ refuses ours
        await (await connection.channel()).declare_queue(topology.agent_queue_name(refused), durable=True)
    clock = Clock()
    queues = AgentQueues(broker, retry_refused_after=5.0, clock=clock)

    await queues.ensure_many({before: False, refused: False, after: False})

    assert (queues.known(before), queues.known(refused), queues.known(after)) == (True, False, True)
    assert await queue_exists(servers.amqp_url, topology.agent_queue_name(after))
    await delete_queue(servers, refused)
    await queues.ensure_many({refused: False})  # refused a moment ago: not asked again yet
    assert not await queue_exists(servers.amqp_url, topology.agent_queue_name(refused))
    clock.now += 5.5
    await queues.ensure_many({refused: False})
    assert queues.known(refused)
    for host_id in (before, refused, after):
        await delete_queue(servers, host_id)
