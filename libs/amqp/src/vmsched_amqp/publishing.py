"""The one way a vmsched service sends a message.

Every message is one the event contract (:mod:`vmsched_amqp.events`, the AsyncAPI document)
declares: persistent, confirmed by the broker, JSON, a message id made from what it carries (a
message sent again for the same VMs has the same id), and the trace context in its headers.

Events go through FastStream's publishers (its telemetry middleware makes the producer span).
Agent commands, one per VM and the most numerous message vmsched sends, go straight through an
aio-pika channel with confirms, with a producer span of the same name: FastStream's publish path cost
the gateway a fifth of its CPU (docs/performance.md). They are not persistent: RabbitMQ writing each
one to disk in one of thousands of host queues cost it 0.7 ms of CPU a message against 0.2 ms
(bench/broker_floor.py's method). A command lost with a broker restart is sent again: the gateway
resends the create of a VM still ``scheduled`` after VMSCHED_RESEND_STALE_AFTER, the API the delete
of one still ``deleting``, and agents carry out a repeated command once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import aio_pika
from aio_pika.abc import AbstractChannel
from faststream.rabbit import RabbitBroker
from opentelemetry import propagate, trace

from vmsched_amqp import events, topology
from vmsched_contract.messages import (
    MAX_VMS_PER_MESSAGE,
    AgentCommand,
    AgentConflict,
    Assignment,
    Unplaced,
    VmAssigned,
    VmCreate,
    VmDeleted,
    VmMigrate,
    VmMigrated,
    VmMigrating,
    VmMigrationFailed,
    VmOrphaned,
    VmPreempted,
    VmToPlace,
    VmUnschedulable,
    VmWaiting,
    WaitingVm,
    batch_message_id,
    command_message_id,
)

if TYPE_CHECKING:
    from faststream.rabbit.publisher import RabbitPublisher


T = TypeVar("T")


def chunks(items: Sequence[T], size: int = MAX_VMS_PER_MESSAGE) -> list[Sequence[T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


tracer = trace.get_tracer("vmsched_amqp.publishing")
JSON = "application/json"


class Publisher:
    """Publishers of every message a service sends. Declaring them on the broker is what puts them
    in the AsyncAPI document; a service only declares those it makes."""

    def __init__(self, broker: RabbitBroker) -> None:
        self.broker = broker
        self._publishers: dict[str, RabbitPublisher] = {}
        self._commands: AbstractChannel | None = None
        self._opening = asyncio.Lock()

    def _publisher(self, declare: events.Declare) -> RabbitPublisher:
        key = declare.__name__
        if key not in self._publishers:
            self._publishers[key] = declare(self.broker)
        return self._publishers[key]

    async def vm_create(self, vms: Sequence[VmToPlace]) -> None:
        """``vm.create`` for these VMs: one message per MAX_VMS_PER_MESSAGE, sent at once."""
        publisher = self._publisher(events.vm_create)
        await asyncio.gather(
            *(
                publisher.publish(
                    VmCreate(vms=list(part)),
                    message_id=batch_message_id("create", [(vm.vm_id, vm.attempt) for vm in part]),
                )
                for part in chunks(vms)
            )
        )

    async def vm_assigned(self, assignments: Sequence[Assignment]) -> None:
        await self._publisher(events.vm_assigned).publish(
            VmAssigned(assignments=list(assignments)),
            message_id=batch_message_id("assigned", [(a.vm_id, a.attempt) for a in assignments]),
        )

    async def vm_unschedulable(self, vms: Sequence[Unplaced]) -> None:
        await self._publisher(events.vm_unschedulable).publish(
            VmUnschedulable(vms=list(vms)),
            message_id=batch_message_id("unschedulable", [(vm.vm_id, vm.attempt) for vm in vms]),
        )

    async def vm_waiting(self, vms: Sequence[WaitingVm]) -> None:
        await self._publisher(events.vm_waiting).publish(
            VmWaiting(vms=list(vms)),
            message_id=batch_message_id("waiting", [(vm.vm_id, vm.attempt) for vm in vms]),
        )

    async def vm_deleted(self, event: VmDeleted) -> None:
        await self._publisher(events.vm_deleted).publish(event, message_id=f"{event.vm_id}:deleted")

    async def vm_orphaned(self, event: VmOrphaned) -> None:
        await self._publisher(events.vm_orphaned).publish(event, message_id=f"{event.vm_id}:orphaned:{event.host_id}")

    async def vm_preempted(self, event: VmPreempted) -> None:
        await self._publisher(events.vm_preempted).publish(
            event, message_id=f"{event.vm_id}:preempted:{event.preempted_by}"
        )

    async def agent_conflict(self, event: AgentConflict) -> None:
        await self._publisher(events.agent_conflict).publish(
            event, message_id=f"{event.host_id}:conflict:{event.instance_id}"
        )

    async def vm_migrate(self, request: VmMigrate) -> None:
        await self._publisher(events.vm_migrate).publish(
            request, message_id=f"{request.vm.vm_id}:migrate:{request.migration}"
        )

    async def vm_migrating(self, event: VmMigrating) -> None:
        await self._publisher(events.vm_migrating).publish(
            event, message_id=f"{event.vm_id}:migrating:{event.migration}"
        )

    async def vm_migrated(self, event: VmMigrated) -> None:
        await self._publisher(events.vm_migrated).publish(event, message_id=f"{event.vm_id}:migrated:{event.migration}")

    async def vm_migration_failed(self, event: VmMigrationFailed) -> None:
        await self._publisher(events.vm_migration_failed).publish(
            event, message_id=f"{event.vm_id}:migration_failed:{event.migration}"
        )

    async def command(self, host_id: str, command: AgentCommand) -> None:
        """A command on ``agent.<host_id>`` (through the ``vmsched.agents`` exchange), returned once
        the broker has confirmed it (in the host's queue, not on disk: see above)."""
        exchange = await (await self._command_channel()).get_exchange(topology.AGENTS_EXCHANGE.name, ensure=False)
        with tracer.start_as_current_span(
            f"{topology.AGENTS_EXCHANGE.name}.{host_id} publish", kind=trace.SpanKind.PRODUCER
        ):
            headers: dict[str, object] = {}
            propagate.inject(headers)
            message = aio_pika.Message(
                command.model_dump_json().encode(),
                content_type=JSON,
                delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
                message_id=command_message_id(command),
                headers=headers,  # type: ignore[arg-type]
            )
            await exchange.publish(message, routing_key=host_id)

    async def _command_channel(self) -> AbstractChannel:
        """A channel with publisher confirms on the broker's (robust) connection, opened once."""
        async with self._opening:
            if self._commands is None:
                connection = await self.broker.connect()
                self._commands = await connection.channel(publisher_confirms=True)
            return self._commands
