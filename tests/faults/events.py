"""Count the events a subscriber would see: a queue of the test's own bound to one routing key."""

from __future__ import annotations

import json
from collections import defaultdict
from types import TracebackType

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from vmsched_amqp import topology


class EventCounter:
    """Every message with routing key ``routing_key``, by VM: the message ids that carried it (a
    message carries the VMs of one request: ``assignments`` of ``vm.assigned``, ``vms`` of
    ``vm.create`` and ``vm.unschedulable``; other events one VM)."""

    def __init__(self, amqp_url: str, routing_key: str) -> None:
        self.amqp_url = amqp_url
        self.routing_key = routing_key
        self.by_vm: dict[str, list[str]] = defaultdict(list)  # vm_id -> the message ids that named it
        self.hosts_by_vm: dict[str, list[str]] = defaultdict(list)  # vm_id -> the hosts those messages named
        self.total = 0

    async def __aenter__(self) -> EventCounter:
        self._connection = await aio_pika.connect_robust(self.amqp_url)
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=500)
        exchange = await channel.declare_exchange(topology.EXCHANGE.name, aio_pika.ExchangeType.TOPIC, durable=True)
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(exchange, routing_key=self.routing_key)
        await queue.consume(self._on_message)
        return self

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        async with message.process():
            self.total += 1
            body = json.loads(message.body)
            for vm in body.get("assignments") or body.get("vms") or [body]:
                self.by_vm[vm["vm_id"]].append(message.message_id or "")
                if "hypervisor_id" in vm:
                    self.hosts_by_vm[vm["vm_id"]].append(vm["hypervisor_id"])

    async def __aexit__(self, *exc: object | TracebackType | None) -> None:
        await self._connection.close()
