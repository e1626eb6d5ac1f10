"""The per-host command queues: ``agent.<host id>``, declared by the gateway when it first needs one
(durable, so no command is lost while an agent restarts; agents bind to it passively)."""

from __future__ import annotations

from faststream.rabbit import RabbitBroker

from vmsched_common import topology


class AgentQueues:
    def __init__(self, broker: RabbitBroker) -> None:
        self.broker = broker
        self._declared: set[str] = set()

    async def ensure(self, host_id: str, *, again: bool = False) -> None:
        """Declare ``agent.<host_id>`` the first time this process needs it (idempotent on the broker),
        or ``again``: the queue may have been deleted since (``DELETE /v1/hosts/{id}``)."""
        known = host_id in self._declared
        if known and not again:
            return
        queue = await self.broker.declare_queue(topology.agent_queue(host_id))
        if known:
            await queue.declare()  # FastStream hands back the queue it declared before, without asking the broker
        await queue.bind(topology.AGENTS_EXCHANGE.name, routing_key=host_id)
        self._declared.add(host_id)
