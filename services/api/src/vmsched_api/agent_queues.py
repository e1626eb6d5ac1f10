"""The API's one touch of an agent's command queue: removing it with its host."""

from __future__ import annotations

from faststream.rabbit import RabbitBroker

from vmsched_amqp import topology


async def delete_agent_queue(broker: RabbitBroker, host_id: str) -> None:
    """Delete ``agent.<host_id>`` and whatever it holds (nothing of use: no VM is on the host). The
    broker answers a queue that is already gone as deleted too."""
    connection = await broker.connect()
    channel = await connection.channel()
    try:
        await channel.queue_delete(topology.agent_queue_name(host_id))
    finally:
        await channel.close()
