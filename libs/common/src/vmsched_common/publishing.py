"""The one way a vmsched service sends a message.

Every message goes through a publisher declared in :mod:`vmsched_common.events` (so the AsyncAPI
document describes exactly what is sent): persistent, confirmed by the broker, JSON, a message id
made from what it carries (a message sent again for the same VMs has the same id), and the trace
context in its headers (FastStream's telemetry middleware).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from faststream.rabbit import RabbitBroker

from vmsched_common import events
from vmsched_common.messages import (
    MAX_VMS_PER_MESSAGE,
    AgentCommand,
    Assignment,
    Unplaced,
    VmAssigned,
    VmCreate,
    VmDeleted,
    VmOrphaned,
    VmToPlace,
    VmUnschedulable,
    batch_message_id,
    command_message_id,
)

if TYPE_CHECKING:
    from faststream.rabbit.publisher import RabbitPublisher


T = TypeVar("T")


def chunks(items: Sequence[T], size: int = MAX_VMS_PER_MESSAGE) -> list[Sequence[T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


class Publisher:
    """Publishers of every message a service sends. Declaring them on the broker is what puts them
    in the AsyncAPI document; a service only declares those it makes."""

    def __init__(self, broker: RabbitBroker) -> None:
        self.broker = broker
        self._publishers: dict[str, RabbitPublisher] = {}

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

    async def vm_deleted(self, event: VmDeleted) -> None:
        await self._publisher(events.vm_deleted).publish(event, message_id=f"{event.vm_id}:deleted")

    async def vm_orphaned(self, event: VmOrphaned) -> None:
        await self._publisher(events.vm_orphaned).publish(event, message_id=f"{event.vm_id}:orphaned:{event.host_id}")

    async def command(self, host_id: str, command: AgentCommand) -> None:
        """A command on ``agent.<host_id>`` (through the ``vmsched.agents`` exchange)."""
        await self._publisher(events.agent_command).publish(
            command,
            routing_key=host_id,
            message_id=command_message_id(command.vm_id, command.action, command.attempt),
        )
