"""The API's outbox sweeper on the real servers: a VM whose message was never confirmed, or was
confirmed long ago and never acted on (dead-lettered after broker restarts), is published again."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest
from faststream.rabbit import RabbitQueue
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_amqp import topology
from vmsched_amqp.broker import declare_topology, make_broker, ready_messages
from vmsched_amqp.publishing import Publisher
from vmsched_pg.outbox import republish_unpublished
from vmsched_runtime.settings import Settings


@pytest.fixture
async def vm_create_messages(servers: Servers) -> AsyncIterator[list[str]]:
    """The vm_id of every ``vm.create`` published while the test runs."""
    seen: list[str] = []
    connection = await aio_pika.connect(servers.amqp_url)
    channel = await connection.channel()
    exchange = await channel.declare_exchange(topology.EXCHANGE.name, aio_pika.ExchangeType.TOPIC, durable=True)
    queue = await channel.declare_queue(exclusive=True)
    await queue.bind(exchange, routing_key=topology.VM_CREATE)

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        async with message.process():
            seen.extend(vm["vm_id"] for vm in json.loads(message.body)["vms"])

    await queue.consume(on_message)
    try:
        yield seen
    finally:
        await connection.close()


async def _insert(engine: AsyncEngine, vm_id: uuid.UUID, published_ago: float | None, updated_ago: float) -> None:
    async with engine.begin() as connection:
        await connection.execute(
            text(
                """
                INSERT INTO vms (id, name, status, cpu, memory_mb, disk_gb, updated_at, published_at)
                VALUES (:id, 'outbox', 'pending', 1, 512, 5, now() - make_interval(secs => :updated),
                        CASE WHEN CAST(:published AS float8) IS NULL THEN NULL
                             ELSE now() - make_interval(secs => CAST(:published AS float8)) END)
                """
            ),
            {"id": vm_id, "updated": updated_ago, "published": published_ago},
        )


async def test_unconfirmed_and_stale_vms_are_published_again_and_fresh_ones_are_not(
    private_engine: AsyncEngine, settings: Settings, vm_create_messages: list[str]
) -> None:
    # A database of its own: the session stack's scheduler would otherwise act on these rows.
    engine = private_engine
    never_confirmed, stale, fresh = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await _insert(engine, never_confirmed, published_ago=None, updated_ago=60)
    await _insert(engine, stale, published_ago=600, updated_ago=600)
    await _insert(engine, fresh, published_ago=1, updated_ago=1)

    broker = make_broker(settings)
    try:
        await broker.connect()
        await declare_topology(broker)
        await republish_unpublished(Publisher(broker), engine, older_than=5, stale_after=120, limit=10_000)
        async with engine.connect() as connection:
            ages: dict[uuid.UUID, float] = dict(
                (
                    await connection.execute(
                        text(
                            "SELECT id, extract(epoch FROM now() - published_at) FROM vms "
                            "WHERE id = ANY(CAST(:ids AS uuid[]))"
                        ),
                        {"ids": [str(never_confirmed), str(stale), str(fresh)]},
                    )
                ).all()
            )
    finally:
        await broker.stop()

    mine = {str(never_confirmed), str(stale), str(fresh)}
    await eventually(
        lambda: asyncio.sleep(0, [v for v in vm_create_messages if v in mine]),
        lambda got: sorted(got) == sorted([str(never_confirmed), str(stale)]),
        timeout=10,
        what="one vm.create for each of the unconfirmed and the stale VM",
    )
    # Marked as published just now, so the next sweep leaves them alone for VMSCHED_RESEND_STALE_AFTER.
    assert ages[never_confirmed] < 60
    assert ages[stale] < 60
    assert ages[fresh] >= 1  # inserted as published 1 s ago, and left alone


async def test_while_the_schedulers_have_a_backlog_only_unconfirmed_vms_are_sent_again(
    private_engine: AsyncEngine, settings: Settings, vm_create_messages: list[str]
) -> None:
    never_confirmed, stale = uuid.uuid4(), uuid.uuid4()
    await _insert(private_engine, never_confirmed, published_ago=None, updated_ago=60)
    await _insert(private_engine, stale, published_ago=600, updated_ago=600)

    broker = make_broker(settings)
    try:
        await broker.connect()
        await declare_topology(broker)
        sent = await republish_unpublished(
            Publisher(broker), private_engine, older_than=5, stale_after=120, resend_stale=False, limit=10_000
        )
    finally:
        await broker.stop()

    assert sent == 1
    await eventually(
        lambda: asyncio.sleep(0, [v for v in vm_create_messages if v in {str(never_confirmed), str(stale)}]),
        lambda got: got == [str(never_confirmed)],
        timeout=10,
        what="a vm.create for the unconfirmed VM only",
    )


async def test_ready_messages_counts_what_waits_in_a_queue(settings: Settings) -> None:
    queue = RabbitQueue(f"test-depth-{uuid.uuid4().hex[:8]}", durable=False, auto_delete=True)
    broker = make_broker(settings)
    try:
        await broker.connect()
        assert await ready_messages(broker, queue) == 0
        for n in range(3):
            await broker.publish({"n": n}, queue=queue)
        assert await ready_messages(broker, queue) == 3
    finally:
        await broker.stop()


async def test_a_heartbeat_queue_left_by_an_older_version_is_replaced(settings: Settings, servers: Servers) -> None:
    """gateway.heartbeats was a classic queue; RabbitMQ refuses to declare it quorum over that.
    Its messages are disposable, so declare_topology replaces it."""
    vhost = f"vmsched-test-old-{uuid.uuid4().hex[:8]}"
    servers.broker.add_vhost(vhost, "guest")
    try:
        url = servers.amqp_url.rsplit("/", 1)[0] + "/" + vhost
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(
                topology.GATEWAY_HEARTBEAT_QUEUE.name,
                durable=True,
                arguments={"x-max-length": 100_000, "x-overflow": "drop-head"},
            )
        broker = make_broker(settings.model_copy(update={"amqp_url": url}))
        try:
            await broker.connect()
            await declare_topology(broker)
            assert await ready_messages(broker, topology.GATEWAY_HEARTBEAT_QUEUE) == 0
        finally:
            await broker.stop()
        assert servers.broker.queue_type(vhost, topology.GATEWAY_HEARTBEAT_QUEUE.name) == "quorum"
    finally:
        servers.broker.delete_vhost(vhost)
