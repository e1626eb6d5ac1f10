"""Publishing what a committed VM row implies, and remembering that it was published.

A row's ``published_at`` stays NULL until the broker confirmed the message its status implies
(``vm.create`` for pending, the delete command for deleting). Whoever commits a row publishes right
after the commit; if that publish fails, or the process dies in between, the sweeper
(:func:`republish_unpublished`) finds the row and publishes again. Consumers are idempotent, so a
message sent twice does no harm; a message never sent would leave the VM pending forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from faststream.rabbit import RabbitBroker
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_common import topology
from vmsched_common.batching import Batcher
from vmsched_common.logs import get_logger
from vmsched_common.messages import (
    AgentCommand,
    CommandAction,
    Resources,
    VmCreate,
    command_message_id,
    create_message_id,
)
from vmsched_common.settings import Strategy

log = get_logger(__name__)

VM_COLUMNS = "id, name, status, hypervisor_id, cpu, memory_mb, disk_gb, gpu, labels, strategy, exclude_hosts, attempt"

_MARK_PUBLISHED = text(
    """
    UPDATE vms SET published_at = now()
     WHERE id = ANY(CAST(:ids AS uuid[])) AND status IN ('pending', 'deleting')
    """
)
_UNPUBLISHED = text(
    f"""
    SELECT {VM_COLUMNS} FROM vms
     WHERE status IN ('pending', 'deleting')
       AND ((published_at IS NULL AND updated_at < now() - make_interval(secs => :age))
            OR (CAST(:resend_stale AS boolean) AND published_at < now() - make_interval(secs => :stale)))
     ORDER BY coalesce(published_at, updated_at) LIMIT :limit
    """
)


@dataclass(frozen=True, slots=True)
class VmRow:
    """The columns of a VM that its messages need."""

    id: UUID
    name: str
    status: str
    hypervisor_id: str | None
    resources: Resources
    labels: dict[str, str]
    strategy: Strategy | None
    exclude_hosts: list[str]
    attempt: int

    @classmethod
    def from_row(cls, row: Any) -> VmRow:
        return cls(
            id=row.id,
            name=row.name,
            status=row.status,
            hypervisor_id=row.hypervisor_id,
            resources=Resources(cpu=row.cpu, memory_mb=row.memory_mb, disk_gb=row.disk_gb, gpu=row.gpu),
            labels=dict(row.labels or {}),
            strategy=Strategy(row.strategy) if row.strategy else None,
            exclude_hosts=list(row.exclude_hosts or []),
            attempt=row.attempt,
        )

    def create_message(self) -> VmCreate:
        return VmCreate(
            vm_id=self.id,
            name=self.name,
            resources=self.resources,
            labels=self.labels,
            strategy=self.strategy,
            exclude_hosts=self.exclude_hosts,
            attempt=self.attempt,
        )

    def create_command(self) -> AgentCommand:
        return AgentCommand(
            action=CommandAction.CREATE,
            vm_id=self.id,
            name=self.name,
            resources=self.resources,
            attempt=self.attempt,
        )

    def delete_command(self) -> AgentCommand:
        return AgentCommand(
            action=CommandAction.DELETE,
            vm_id=self.id,
            name=self.name,
            resources=self.resources,
            attempt=self.attempt,
        )


async def publish_vm_create(broker: RabbitBroker, vm: VmRow) -> None:
    message = vm.create_message()
    await broker.publish(
        message,
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_CREATE,
        message_id=create_message_id(vm.id, vm.attempt),
        persist=True,
    )


async def publish_delete_command(broker: RabbitBroker, vm: VmRow) -> None:
    if vm.hypervisor_id is None:
        return
    await send_command(broker, vm.hypervisor_id, vm.delete_command())


async def send_command(broker: RabbitBroker, host_id: str, command: AgentCommand) -> None:
    await broker.publish(
        command,
        exchange=topology.AGENTS_EXCHANGE,
        routing_key=host_id,
        message_id=command_message_id(command.vm_id, command.action, command.attempt),
        persist=True,
    )


async def _publish_row(broker: RabbitBroker, vm: VmRow) -> None:
    if vm.status == "pending":
        await publish_vm_create(broker, vm)
    elif vm.status == "deleting":
        await publish_delete_command(broker, vm)


PublishedMarks = Batcher[list[str], None]


def published_marks(engine: AsyncEngine) -> PublishedMarks:
    """Records of confirmed publishes, shared by concurrent callers: the API's single POSTs each
    publish one row, and at hundreds a second one UPDATE every few milliseconds replaces one
    transaction per request. Drain it on shutdown."""

    async def mark(batches: list[list[str]]) -> list[None]:
        async with engine.begin() as connection:
            await connection.execute(_MARK_PUBLISHED, {"ids": [vm_id for ids in batches for vm_id in ids]})
        return [None] * len(batches)

    return Batcher(mark, name="published_marks", max_size=256, max_delay=0.003)


async def publish_rows(
    broker: RabbitBroker, engine: AsyncEngine, rows: Sequence[VmRow], *, marks: PublishedMarks | None = None
) -> None:
    """Publish each row's message with confirms, then record them all as published (through
    ``marks`` when given, else in a transaction of its own).

    All at once: the broker confirms a stream of messages about as fast as one, so a batch of 1,000
    costs one wait instead of 1,000. If one fails, none is marked; the sweeper sends them again."""
    await asyncio.gather(*(_publish_row(broker, vm) for vm in rows))
    done = [str(vm.id) for vm in rows]
    if not done:
        return
    if marks is not None:
        await marks.submit(done)
        return
    async with engine.begin() as connection:
        await connection.execute(_MARK_PUBLISHED, {"ids": done})


async def republish_unpublished(
    broker: RabbitBroker,
    engine: AsyncEngine,
    *,
    older_than: float,
    stale_after: float,
    resend_stale: bool = True,
    limit: int = 500,
) -> int:
    """One sweep: publish rows whose message was never confirmed (older than ``older_than``), and,
    with ``resend_stale``, those confirmed ``stale_after`` seconds ago and still not acted on.
    Returns how many."""
    params = {"age": older_than, "stale": stale_after, "resend_stale": resend_stale, "limit": limit}
    async with engine.connect() as connection:
        rows = (await connection.execute(_UNPUBLISHED, params)).all()
    vms = [VmRow.from_row(row) for row in rows]
    if vms:
        log.warning("publishing messages left unpublished or unanswered", count=len(vms))
        await publish_rows(broker, engine, vms)
    return len(vms)
