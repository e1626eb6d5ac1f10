"""The gateway's heartbeat consumer: every host's heartbeat, a few hundred a second at 10,000 hosts.

A plain aio-pika consumer, like the agent SDK's command consumers, rather than a FastStream
subscriber. Through FastStream's per-message pipeline (dependency injection, context scopes,
telemetry and logging middlewares, an ack) each heartbeat cost the gateway 2.8 ms of CPU: 0.92 of
a core with 10,000 idle hosts beating every 30 s (docs/performance.md). Heartbeats need none of it:
they carry no trace, the next one replaces a lost one, and they are folded in batches anyway. So they
are taken without acks (``no_ack``: the broker forgets them on delivery), validated with the same
pydantic model, and a malformed one still goes to the dead-letter exchange with the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue
from faststream.rabbit import RabbitBroker
from pydantic import ValidationError

from vmsched_common import topology
from vmsched_common.amqp import dead_letter, poison_reason
from vmsched_common.logs import get_logger
from vmsched_common.messages import AgentHeartbeat

log = get_logger(__name__)

OnHeartbeat = Callable[[AgentHeartbeat], Awaitable[None]]

# Heartbeats handed over at once: they are not acked, so this only bounds the gateway's memory
# while a batch is written.
PREFETCH = 2000


class HeartbeatIntake:
    def __init__(self, broker: RabbitBroker, on_heartbeat: OnHeartbeat) -> None:
        self.broker = broker
        self.on_heartbeat = on_heartbeat
        self._queue: AbstractQueue | None = None
        self._consumer_tag: str | None = None

    async def start(self) -> None:
        """Consume ``gateway.heartbeats`` (declared by ``declare_topology``) on a robust channel of
        the broker's connection: after a reconnect aio-pika declares it again and resumes."""
        connection = await self.broker.connect()
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=PREFETCH)
        queue = topology.GATEWAY_HEARTBEAT_QUEUE
        self._queue = await channel.declare_queue(
            queue.name, durable=queue.durable, arguments=dict(queue.arguments or {})
        )
        self._consumer_tag = await self._queue.consume(self._on_message, no_ack=True)

    async def stop(self) -> None:
        if self._queue is None or self._queue.channel.is_closed:
            return
        if self._consumer_tag is not None:
            await self._queue.cancel(self._consumer_tag)
        await self._queue.channel.close()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            beat = AgentHeartbeat.model_validate_json(message.body)
        except (ValidationError, ValueError) as error:
            reason = poison_reason(error) or f"invalid heartbeat: {error}"
            await dead_letter(self.broker, message, topology.GATEWAY_HEARTBEAT_QUEUE.name, reason)
            return
        try:
            await self.on_heartbeat(beat)
        except Exception as error:  # the next heartbeat of the host comes within its interval
            log.warning("heartbeat not recorded", host=beat.agent_id, error=repr(error))
