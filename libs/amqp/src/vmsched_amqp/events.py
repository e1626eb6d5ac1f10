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

from vmsched_amqp import topology
from vmsched_contract.messages import (
    AgentCommand,
    AgentConflict,
    AgentHeartbeat,
    VmAssigned,
    VmCreate,
    VmDeleted,
    VmMigrate,
    VmMigrated,
    VmMigrating,
    VmMigrationFailed,
    VmOrphaned,
    VmPreempted,
    VmStatusReport,
    VmUnschedulable,
    VmWaiting,
)

if TYPE_CHECKING:
    from faststream.rabbit.publisher import RabbitPublisher

TITLE = "vmsched events"
DESCRIPTION = """Events vmsched publishes on the topic exchange `vmsched` (durable). A subscriber
declares its own queue, binds it to `vmsched` with the routing keys it wants (`vm.assigned`,
`vm.*`, ...) and acks what it handled. Messages are JSON (`content_type` application/json), persistent,
with a deterministic `message_id`. `vm.create`, `vm.assigned` and `vm.unschedulable` carry a list of
VMs (those of one request). Delivery is at least once, and a VM may be announced again in another
message after a crash: a VM's `(vm_id, attempt)` names one placement. Trace context (W3C
`traceparent`) travels in the headers. Without AMQP, the API serves the `vm.*` events as server-sent
events at `GET /v1/events` (filtered by type and project, resumable with `Last-Event-ID`). See
docs/events.md.
"""

Declare = Callable[[RabbitBroker], "RabbitPublisher"]


def vm_create(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_CREATE,
        persist=True,
        schema=VmCreate,
        title=topology.VM_CREATE,
        description="VMs to place: those of one request (published by the API, and by the gateway for a retry or a "
        "restart). message_id is '<first vm_id>:create:<its attempt>[+<more VMs>]'; a VM may be sent more than "
        "once (after a crash or a broker outage) and schedulers place it once.",
    )


def vm_assigned(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_ASSIGNED,
        persist=True,
        schema=VmAssigned,
        title=topology.VM_ASSIGNED,
        description="VMs placed on hosts, those of one vm.create that found a host (published by a scheduler); "
        "PostgreSQL already records them. message_id is '<first vm_id>:assigned:<its attempt>[+<more VMs>]'.",
    )


def vm_unschedulable(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_UNSCHEDULABLE,
        persist=True,
        schema=VmUnschedulable,
        title=topology.VM_UNSCHEDULABLE,
        description="VMs no host can take, those of one vm.create (published by a scheduler); each VM's "
        "rejections count hosts by the first rule that refused them. "
        "message_id is '<first vm_id>:unschedulable:<its attempt>[+<more VMs>]'.",
    )


def vm_waiting(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_WAITING,
        persist=True,
        schema=VmWaiting,
        title=topology.VM_WAITING,
        description="VMs no host can take yet that may wait for room (wait_s), those of one vm.create (published by "
        "a scheduler): each is placed, oldest first, when capacity it fits appears (then vm.assigned, at the next "
        "attempt), or ends vm.unschedulable at its wait_until. "
        "message_id is '<first vm_id>:waiting:<its attempt>[+<more VMs>]'.",
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


def vm_orphaned(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_ORPHANED,
        persist=True,
        schema=VmOrphaned,
        title=topology.VM_ORPHANED,
        description="An agent runs a VM vmsched does not hold on that host (published by the gateway): 'moved' when "
        "vmsched holds it elsewhere now, 'gone' when nowhere; 'deleted' says whether the agent was told to delete it "
        "(VMSCHED_ORPHAN_VMS). message_id is '<vm_id>:orphaned:<host_id>'.",
    )


def vm_preempted(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_PREEMPTED,
        persist=True,
        schema=VmPreempted,
        title=topology.VM_PREEMPTED,
        description="A VM of higher priority that fit nowhere took this VM's room (published by a scheduler, once "
        "PostgreSQL records both): its capacity is the preemptor's, its agent is told to delete it, then its "
        "restart policy applies. message_id is '<vm_id>:preempted:<preempted_by>'.",
    )


def agent_conflict(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.AGENT_CONFLICT,
        persist=True,
        schema=AgentConflict,
        title=topology.AGENT_CONFLICT,
        description="A second agent process (another instance_id) sent heartbeats for a host while the instance "
        "holding its id was online (published by the gateway); they were refused and dead-lettered, the host left "
        "as it was. At most one a minute per host and refused instance. "
        "message_id is '<host_id>:conflict:<refused instance_id>'.",
    )


def vm_migrate(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_MIGRATE,
        persist=True,
        schema=VmMigrate,
        title=topology.VM_MIGRATE,
        description="A running VM to move (published by the API for POST /v1/vms/{id}/migrate, and again by the "
        "gateway if no scheduler answered within VMSCHED_RESEND_STALE_AFTER): a scheduler chooses the target by "
        "every rule of the VM, its source excluded, claims it and commits it. "
        "message_id is '<vm_id>:migrate:<migration>'.",
    )


def vm_migrating(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_MIGRATING,
        persist=True,
        schema=VmMigrating,
        title=topology.VM_MIGRATING,
        description="A scheduler claimed the migration's target (from: the source, to: the target): the VM holds "
        "capacity on both hosts until it runs on the target (vm.migrated) or the migration is rolled back "
        "(vm.migration_failed). The gateway tells the target to prepare. "
        "message_id is '<vm_id>:migrating:<migration>'.",
    )


def vm_migrated(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_MIGRATED,
        persist=True,
        schema=VmMigrated,
        title=topology.VM_MIGRATED,
        description="The VM runs on its new host (to); the old one's (from) capacity is free again (published by "
        "the gateway). message_id is '<vm_id>:migrated:<migration>'.",
    )


def vm_migration_failed(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.EXCHANGE,
        routing_key=topology.VM_MIGRATION_FAILED,
        persist=True,
        schema=VmMigrationFailed,
        title=topology.VM_MIGRATION_FAILED,
        description="The migration was rolled back, or no host could take the VM: it runs on its source (from) "
        "still, and a target claimed for it (to, null if none was) is free again; reason and detail say why "
        "(published by a scheduler when no host fits, by the gateway when a step failed or timed out). "
        "message_id is '<vm_id>:migration_failed:<migration>'.",
    )


def agent_command(broker: RabbitBroker) -> RabbitPublisher:
    return broker.publisher(
        exchange=topology.AGENTS_EXCHANGE,
        persist=False,
        schema=AgentCommand,
        title="agent.<host id>",
        description="A command for one host's agent (published by the gateway, and by the API for deletes, stops, "
        "starts) on the "
        "direct exchange vmsched.agents, routing key = the host id, into the host's queue agent.<host id>. "
        "Not persistent: one a broker restart loses is sent again after VMSCHED_RESEND_STALE_AFTER. "
        "message_id is '<vm_id>:<action>-command:<attempt>' ('m<migration>' instead of the attempt for a "
        "migration's command); an agent carries out a repeat once.",
    )


EVENTS: tuple[Declare, ...] = (
    vm_create,
    vm_assigned,
    vm_unschedulable,
    vm_waiting,
    vm_deleted,
    vm_orphaned,
    vm_preempted,
    vm_migrate,
    vm_migrating,
    vm_migrated,
    vm_migration_failed,
    vm_status,
    agent_heartbeat,
    agent_conflict,
    agent_command,
)


def declare_all(broker: RabbitBroker) -> None:
    """Declare every event on ``broker`` (for its AsyncAPI document; nothing is published)."""
    for declare in EVENTS:
        declare(broker)
