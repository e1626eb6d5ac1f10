"""The per-host command queues: ``agent.<host id>``, declared by the gateway when it first needs one
(durable, so no command is lost while an agent restarts; agents bind to it passively).

They are classic queues (topology.agent_queue says why), each on one node of a cluster, so they are
declared on a channel of their own that no reconnection restores (amqp_channels.py): while a node is
down, RabbitMQ refuses to declare its queues, and a reconnection that declared them again would fail
whole, taking the gateway offline with it. A refused declaration is not an error here: the command
is published anyway, RabbitMQ drops what it cannot route, and the VM stays ``scheduled`` until the
stale-command sweep (health.py) sends it again, declaring the queue first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractRobustConnection
from faststream.rabbit import RabbitBroker

from vmsched_amqp import topology
from vmsched_amqp.channels import plain_channel
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)

# Seconds before a queue RabbitMQ refused is asked for again: a node down stays down for a while, and
# each refusal costs a channel.
RETRY_REFUSED_AFTER = 5.0
# Queues declared before one round trip confirms them all (ensure_many): declared one by one, a queue
# costs two round trips, each waiting its turn on a busy gateway's event loop, and a thousand new
# hosts took over two minutes.
DECLARE_BATCH = 100


class AgentQueues:
    def __init__(
        self,
        broker: RabbitBroker,
        *,
        retry_refused_after: float = RETRY_REFUSED_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.retry_refused_after = retry_refused_after
        self.clock = clock
        self._declared: set[str] = set()
        self._refused: dict[str, float] = {}
        self._channel: AbstractChannel | None = None
        self._connection: AbstractConnection | None = None
        self._lock = asyncio.Lock()

    def known(self, host_id: str) -> bool:
        """Whether ``agent.<host_id>`` was declared since this process last connected."""
        return host_id in self._declared

    def _asked_lately(self, host_id: str) -> bool:
        refused_at = self._refused.get(host_id)
        return refused_at is not None and self.clock() - refused_at < self.retry_refused_after

    async def ensure_many(self, hosts: Mapping[str, bool]) -> None:
        """:meth:`ensure` for many hosts (host id -> ``again``), :data:`DECLARE_BATCH` queues per
        round trip: their declarations are sent without waiting for answers, then one question
        that RabbitMQ answers only after them all. A batch RabbitMQ refuses in part is declared
        again one queue at a time, so that the one refused is known and the others are not."""
        todo = [
            host_id
            for host_id, again in hosts.items()
            if again or (host_id not in self._declared and not self._asked_lately(host_id))
        ]
        for start in range(0, len(todo), DECLARE_BATCH):
            batch = todo[start : start + DECLARE_BATCH]
            if not await self._declare_batch(batch):
                for host_id in batch:
                    await self.ensure(host_id, again=True)

    async def _declare_batch(self, host_ids: list[str]) -> bool:
        async with self._lock:
            try:
                channel = await (await self._declaring_channel()).get_underlay_channel()
                arguments = topology.agent_queue_arguments()
                for host_id in host_ids:
                    name = topology.agent_queue_name(host_id)
                    await channel.queue_declare(name, durable=True, arguments=arguments, nowait=True)
                    await channel.queue_bind(name, topology.AGENTS_EXCHANGE.name, routing_key=host_id, nowait=True)
                # A channel's methods are answered in order: this answer comes after every one above
                # was done, and a refusal of any of them closes the channel and fails it instead.
                await channel.queue_declare(topology.agent_queue_name(host_ids[-1]), passive=True)
            except (aiormq.exceptions.AMQPError, ConnectionError, RuntimeError) as error:
                log.debug("agent queues not declared together; one at a time", hosts=len(host_ids), error=str(error))
                return False
        for host_id in host_ids:
            self._refused.pop(host_id, None)
        self._declared.update(host_ids)
        return True

    async def ensure(self, host_id: str, *, again: bool = False) -> bool:
        """Declare ``agent.<host_id>`` (and bind it) the first time this process needs it since it
        last connected to the broker, or ``again``: the queue may have been deleted since
        (``DELETE /v1/hosts/{id}``). False when RabbitMQ refused or could not be asked (the next
        call within ``retry_refused_after`` seconds does not ask again)."""
        if host_id in self._declared and not again:
            return True
        if self._asked_lately(host_id) and not again:
            return False
        async with self._lock:
            try:
                channel = await self._declaring_channel()
                queue = await channel.declare_queue(
                    topology.agent_queue_name(host_id), durable=True, arguments=topology.agent_queue_arguments()
                )
                await queue.bind(topology.AGENTS_EXCHANGE.name, routing_key=host_id)
            except (aiormq.exceptions.AMQPError, ConnectionError, RuntimeError) as error:
                # RuntimeError: aio-pika's word for a connection that is closing or reconnecting.
                # Said once per host until it is declared: a node down is refused every few seconds.
                say = log.debug if host_id in self._refused else log.warning
                say("agent queue not declared; its commands wait for the resend", host=host_id, error=str(error))
                self._refused[host_id] = self.clock()
                return False
        self._refused.pop(host_id, None)
        self._declared.add(host_id)
        return True

    def forget(self, *_: object) -> None:
        """Declare every queue again when next needed: after a reconnection the broker may be a new
        one that never had them (a node rebuilt from scratch)."""
        self._declared.clear()
        self._refused.clear()

    async def _declaring_channel(self) -> AbstractChannel:
        connection = await self.broker.connect()
        if connection is not self._connection:
            if isinstance(connection, AbstractRobustConnection):  # FastStream always makes one
                connection.reconnect_callbacks.add(self.forget)
            self._connection = connection
        if self._channel is None or self._channel.is_closed:
            self._channel = await plain_channel(connection)
        return self._channel
