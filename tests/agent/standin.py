"""The gateway's part in agent tests, on the real broker: declares ``agent.<id>`` when it sees a host's
heartbeat, sends commands the way the gateway does, and watches ``vm.status`` and heartbeats
through its own queues (bound next to whatever else is bound)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from uuid import UUID

from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustConnection
from faststream.rabbit import RabbitBroker

from vmsched_amqp import topology
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import AgentCommand, AgentHeartbeat, ReportedStatus, VmStatusReport

T = TypeVar("T")


@dataclass(frozen=True)
class Received:
    """A status report with the AMQP properties it came with."""

    report: VmStatusReport
    message_id: str | None
    content_type: str | None
    persistent: bool
    user_id: str | None = None


class StandInGateway:
    def __init__(self, broker: RabbitBroker) -> None:
        self.broker = broker
        self.publisher = Publisher(broker)
        self.declare_queues = True
        self.heartbeats: list[AgentHeartbeat] = []
        self.heartbeat_users: dict[str, set[str | None]] = {}  # host id -> the AMQP user_ids of its heartbeats
        self.statuses: list[Received] = []
        self.declared: set[str] = set()
        self.ever_declared: set[str] = set()
        self._changed = asyncio.Condition()
        self._channel: AbstractRobustChannel | None = None

    async def start(self) -> None:
        connection: AbstractRobustConnection = await self.broker.connect()
        channel = await connection.channel()
        self._channel = channel
        for routing_key, on_message in (
            (topology.AGENT_HEARTBEAT, self._on_heartbeat),
            (topology.VM_STATUS, self._on_status),
        ):
            queue = await channel.declare_queue(exclusive=True, auto_delete=True)
            await queue.bind(topology.EXCHANGE.name, routing_key=routing_key)
            await queue.consume(on_message)

    async def stop(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    async def _on_heartbeat(self, message: AbstractIncomingMessage) -> None:
        async with message.process():
            beat = AgentHeartbeat.model_validate_json(message.body)
            if self.declare_queues and beat.agent_id not in self.declared:
                # What the gateway does when it first sees a host.
                queue = await self.broker.declare_queue(topology.agent_queue(beat.agent_id))
                if beat.agent_id in self.ever_declared:  # FastStream hands it back without asking the broker
                    await queue.declare()
                await queue.bind(topology.AGENTS_EXCHANGE.name, routing_key=beat.agent_id)
                self.declared.add(beat.agent_id)
                self.ever_declared.add(beat.agent_id)
            self.heartbeat_users.setdefault(beat.agent_id, set()).add(message.user_id)
            await self._record(self.heartbeats, beat)

    async def _on_status(self, message: AbstractIncomingMessage) -> None:
        async with message.process():
            received = Received(
                report=VmStatusReport.model_validate_json(message.body),
                message_id=message.message_id,
                content_type=message.content_type,
                persistent=message.delivery_mode == 2,
                user_id=message.user_id,
            )
            await self._record(self.statuses, received)

    async def _record(self, items: list[T], item: T) -> None:
        async with self._changed:
            items.append(item)
            self._changed.notify_all()

    async def send(self, host_id: str, command: AgentCommand) -> None:
        """As the gateway sends a command (persistent, confirmed, deterministic message id)."""
        await self.publisher.command(host_id, command)

    async def send_raw(self, host_id: str, body: bytes, message_id: str) -> None:
        await self.broker.publish(
            body,
            exchange=topology.AGENTS_EXCHANGE,
            routing_key=host_id,
            message_id=message_id,
            content_type="application/json",
            persist=True,
        )

    async def wait_for(self, find: Callable[[], T | None], within: float = 5.0) -> T:
        """The first non-None ``find()``, re-evaluated after every message; fails after ``within`` s."""
        async with asyncio.timeout(within), self._changed:
            while (found := find()) is None:
                await self._changed.wait()
            return found

    async def status(self, vm_id: UUID, status: ReportedStatus, *, count: int = 1, within: float = 5.0) -> Received:
        """The ``count``-th report of ``status`` for ``vm_id``."""

        def find() -> Received | None:
            matching = [r for r in self.statuses if r.report.vm_id == vm_id and r.report.status is status]
            return matching[count - 1] if len(matching) >= count else None

        return await self.wait_for(find, within)

    def reports_for(self, vm_id: UUID) -> list[VmStatusReport]:
        return [received.report for received in self.statuses if received.report.vm_id == vm_id]

    async def heartbeat(
        self,
        agent_id: str,
        where: Callable[[AgentHeartbeat], bool] = lambda _: True,
        *,
        after: int = 0,
        within: float = 5.0,
    ) -> AgentHeartbeat:
        """The first heartbeat of ``agent_id`` that satisfies ``where``, among those received after
        the first ``after`` heartbeats (of any agent)."""
        return await self.wait_for(
            lambda: next((b for b in self.heartbeats[after:] if b.agent_id == agent_id and where(b)), None), within
        )
