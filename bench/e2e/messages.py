"""Broker messages per VM placed, counted by a tap of the harness's own on the scheduling path."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from typing import Any

from bench.e2e.fleets import Fleet
from bench.e2e.load import Phase, Senders, paced, wait_received
from devtools.stack import Stack


class Tap:
    """Copies of every message on the scheduling path, counted: a queue of the harness's own bound to
    ``vmsched`` (``vm.#``) and, for each host, to ``vmsched.agents`` (the agents' commands)."""

    def __init__(self, amqp_url: str, host_ids: Sequence[str]) -> None:
        self.amqp_url = amqp_url
        self.host_ids = host_ids
        self.messages: dict[str, int] = {}
        self.vms: dict[str, int] = {}
        self.reported: list[str] = []  # the VM of each vm.status, in order
        self.counted = asyncio.Event()

    async def __aenter__(self) -> Tap:
        import aio_pika

        self._connection = await aio_pika.connect(self.amqp_url)
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=1000)
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind("vmsched", routing_key="vm.#")
        for host_id in self.host_ids:
            await queue.bind("vmsched.agents", routing_key=host_id)
        await queue.consume(self._count, no_ack=True)
        return self

    async def _count(self, message: Any) -> None:
        key = "agent command" if message.exchange == "vmsched.agents" else str(message.routing_key)
        body = json.loads(message.body)
        carried = len(body.get("vms") or body.get("assignments") or [body])
        if key == "vm.status":
            self.reported.append(str(body.get("vm_id")))
        self.messages[key] = self.messages.get(key, 0) + 1
        self.vms[key] = self.vms.get(key, 0) + carried
        self.counted.set()

    async def seen(self, vms: int, keys: Sequence[str], timeout: float = 30.0) -> None:
        """Wait until the tap has counted ``vms`` VMs under each of ``keys`` (its copies arrive beside,
        not before, the agents' own), or the deadline."""
        deadline = time.monotonic() + timeout
        while any(self.vms.get(key, 0) < vms for key in keys) and time.monotonic() < deadline:
            self.counted.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.counted.wait(), deadline - time.monotonic())

    async def __aexit__(self, *exc: object) -> None:
        await self._connection.close()


SCHEDULING_PATH = ("vm.create", "vm.assigned", "vm.unschedulable", "agent command")


async def count_messages(
    stack: Stack, senders: Senders, fleets: Sequence[Fleet], host_ids: Sequence[str], phase: Phase, rate: float
) -> dict[str, Any]:
    async with Tap(stack.env["VMSCHED_AMQP_URL"], host_ids) as tap:
        await paced(senders, phase, rate, 2.0, phase.batch)
        missing = wait_received(fleets, phase.sent)
        placed = len(phase.sent) - missing
        await tap.seen(placed, ("agent command", "vm.status"))
    # Reports about VMs of earlier phases still on their way (a fleet of 10,000 lags its own reports)
    # are not this phase's cost: counted apart.
    earlier = sum(1 for vm in tap.reported if vm not in phase.sent)
    if earlier:
        tap.messages["vm.status"] -= earlier
        tap.vms["vm.status"] -= earlier
        tap.messages["vm.status of earlier VMs"] = tap.vms["vm.status of earlier VMs"] = earlier
    on_path = sum(tap.messages.get(key, 0) for key in SCHEDULING_PATH)
    return {
        "vms": placed,
        "by_routing_key": {key: {"messages": tap.messages[key], "vms": tap.vms[key]} for key in sorted(tap.messages)},
        "scheduling_path_per_vm": round(on_path / placed, 3) if placed else None,
        "all_per_vm": round(sum(tap.messages.values()) / placed, 3) if placed else None,
    }


async def messages_per_vm(
    stack: Stack, senders: Senders, fleets: Sequence[Fleet], host_ids: Sequence[str]
) -> dict[str, Any]:
    """Broker messages per VM placed, counted by a tap: 1,000 VMs in batches of 100 at 500/s, then 100
    single POSTs at 50/s. ``scheduling_path_per_vm``: vm.create, vm.assigned, vm.unschedulable and the
    agents' commands (what the target counts); ``all_per_vm``: with the agents' reports and the rest."""
    return {
        "batches_of_100": await count_messages(stack, senders, fleets, host_ids, Phase("messages", 500.0, 100), 500.0),
        "single": await count_messages(stack, senders, fleets, host_ids, Phase("messages", 50.0, 1), 50.0),
    }
