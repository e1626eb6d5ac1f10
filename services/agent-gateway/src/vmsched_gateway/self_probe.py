"""A small message the gateway sends itself through the broker every second, so that it hears the
broker even when no agent heartbeats (vmsched_gateway.hearing says why that matters).

The probe goes through the default exchange to a queue of this gateway process's own, on the same
connection as the heartbeats: its coming back proves what a heartbeat's arrival would. The queue is
not exclusive (a reconnection declares it again while the broker may still hold the old connection,
which would refuse an exclusive queue), holds nothing for long (a probe is worth a few seconds), and
the broker deletes it a minute after its gateway stopped consuming it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage
from faststream.rabbit import RabbitBroker

from vmsched_gateway.hearing import PROBE_INTERVAL
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)

QUEUE_PREFIX = "gateway.probe."
# Milliseconds: a probe that waited this long says nothing any more; the queue outlives its gateway
# by this long.
PROBE_TTL_MS = 10_000
QUEUE_EXPIRES_MS = 60_000


class SelfProbe:
    def __init__(self, broker: RabbitBroker, heard: Callable[[], None], interval: float = PROBE_INTERVAL) -> None:
        self.broker = broker
        self.heard = heard
        self.interval = interval
        self.queue_name = f"{QUEUE_PREFIX}{uuid.uuid4().hex}"
        self._channel: AbstractChannel | None = None

    async def start(self) -> None:
        """Declare the probe's queue and consume it, on a robust channel: after a reconnection
        aio-pika declares it again and resumes."""
        connection = await self.broker.connect()
        self._channel = await connection.channel(publisher_confirms=False)
        queue = await self._channel.declare_queue(
            self.queue_name,
            durable=False,
            arguments={"x-message-ttl": PROBE_TTL_MS, "x-expires": QUEUE_EXPIRES_MS},
        )
        await queue.consume(self._on_probe, no_ack=True)

    async def _on_probe(self, message: AbstractIncomingMessage) -> None:
        self.heard()

    async def forever(self) -> None:
        """Send a probe every interval; one the broker does not take within the interval is dropped
        (the next one is as good)."""
        while True:
            try:
                async with asyncio.timeout(self.interval):
                    await self.send()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # timed out or disconnected: not hearing it back says so
                log.debug("probe not sent", error=repr(error))
            await asyncio.sleep(self.interval)

    async def send(self) -> None:
        if self._channel is None:
            raise RuntimeError("the probe's queue is not declared yet")
        await self._channel.default_exchange.publish(
            aio_pika.Message(b"", expiration=PROBE_TTL_MS / 1000), routing_key=self.queue_name
        )

    async def stop(self) -> None:
        if self._channel is not None and not self._channel.is_closed:
            await self._channel.close()
