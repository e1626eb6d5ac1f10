"""The event contract for subscribers: every message published on the ``vmsched`` exchange, each
declared once here with its payload model and meaning.

A service declares the publishers it uses through these functions; the API declares all of them,
so that the AsyncAPI document it serves (``/asyncapi``, ``/asyncapi.json``) and the one committed as
docs/asyncapi.json are generated from this code (``make asyncapi``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from faststream.rabbit import RabbitBroker

from vmsched_common import topology
from vmsched_common.messages import AgentHeartbeat, VmAssigned, VmCreate, VmDeleted, VmStatusReport, VmUnschedulable

if TYPE_CHECKING:
    from faststream.rabbit.publisher import RabbitPublisher

TITLE = "vmsched events"
DESCRIPTION = """Events vmsched publishes on the topic exchange `vmsched` (durable). A subscriber
declares its own queue, binds it to `vmsched` with the routing keys it wants (`vm.assigned`,
`vm.*`, ...) and acks what it handled. Messages are JSON (`content_type` application/json), persistent,
with a deterministic `message_id`: delivery is at least once, so a repeated `message_id` is the same
event. Trace context (W3C `traceparent`) travels in the headers. See docs/events.md.
"""


def vm_create(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_CREATE,
        persist=True,
        schema=VmCreate,
        title=topology.VM_CREATE,
        description="A VM to place (published by the API). message_id is '<vm_id>:create:<attempt>'; it may be "
        "sent more than once (after a crash or a broker outage) and schedulers treat repeats as one request.",
    )


def vm_assigned(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_ASSIGNED,
        persist=True,
        schema=VmAssigned,
        title=topology.VM_ASSIGNED,
        description="A VM was placed on a host (published by a scheduler); PostgreSQL already records it. "
        "message_id is '<vm_id>:assigned:<attempt>': a repeat of that id is the same event.",
    )


def vm_unschedulable(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_UNSCHEDULABLE,
        persist=True,
        schema=VmUnschedulable,
        title=topology.VM_UNSCHEDULABLE,
        description="No host can take the VM (published by a scheduler); rejections counts hosts by the first "
        "filter that refused them. message_id is '<vm_id>:unschedulable'.",
    )


def vm_deleted(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_DELETED,
        persist=True,
        schema=VmDeleted,
        title=topology.VM_DELETED,
        description="The agent removed the VM; its capacity is free again (published by the gateway). "
        "message_id is '<vm_id>:deleted'.",
    )


def vm_status(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_STATUS,
        persist=True,
        schema=VmStatusReport,
        title=topology.VM_STATUS,
        description="An agent reports what became of a command: running, failed or deleted (published by "
        "agents, read by the gateway). message_id is '<vm_id>:<status>:<attempt>'.",
    )


def agent_heartbeat(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.AGENT_HEARTBEAT,
        persist=False,
        schema=AgentHeartbeat,
        title=topology.AGENT_HEARTBEAT,
        description="An agent is alive and offers this capacity (published by agents every "
        "VMSCHED_AGENT_HEARTBEAT_INTERVAL seconds, not persistent).",
    )


EVENTS: tuple[Callable[[RabbitBroker], RabbitPublisher], ...] = (
    vm_create,
    vm_assigned,
    vm_unschedulable,
    vm_deleted,
    vm_status,
    agent_heartbeat,
)


def declare_all(broker: RabbitBroker) -> None:
    """Declare every event on ``broker`` (for its AsyncAPI document; nothing is published)."""
    for declare in EVENTS:
        declare(broker)
