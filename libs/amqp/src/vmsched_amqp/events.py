"""The event contract for subscribers: every message published on vmsched's exchanges, as one table
(:data:`EVENTS`): its routing key, payload model, persistence, message id and meaning.

Both readers of the contract read this table: :class:`~vmsched_amqp.publishing.Publisher` sends an
event with its persistence and its message id from here, and the AsyncAPI document the API serves
(``/asyncapi``, ``/asyncapi.json``; committed as docs/asyncapi.json by ``make asyncapi``) declares
every row with its description.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from faststream.rabbit import RabbitBroker, RabbitExchange
from pydantic import BaseModel

from vmsched_amqp import topology
from vmsched_contract.fencing import HostFenced, HostFenceFailed, HostFenceNeeded
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
    batch_message_id,
    command_message_id,
    status_message_id,
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

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Event(Generic[M]):
    """One row of the event contract."""

    title: str  # the routing key, or for agent commands the queue they go to
    schema: type[M]
    persistent: bool
    message_id: Callable[[M], str] | None  # None: a new id each time (heartbeats)
    description: str
    routing_key: str | None = None  # None: the publisher names it (the host id of an agent command)
    exchange: RabbitExchange = topology.EXCHANGE

    def declare(self, broker: RabbitBroker) -> RabbitPublisher:
        """Its FastStream publisher on ``broker`` (which puts it in the broker's AsyncAPI document)."""
        return broker.publisher(
            exchange=self.exchange,
            routing_key=self.routing_key or "",
            persist=self.persistent,
            schema=self.schema,
            title=self.title,
            description=self.description,
        )


def _batch(kind: str, pairs: Callable[[Any], list[tuple[Any, int]]]) -> Callable[[Any], str]:
    return lambda message: batch_message_id(kind, pairs(message))


VM_CREATE: Event[VmCreate] = Event(
    topology.VM_CREATE,
    VmCreate,
    True,
    _batch("create", lambda m: [(vm.vm_id, vm.attempt) for vm in m.vms]),
    "VMs to place (published by the API: a group of single requests' VMs, or one batch's; by the gateway for "
    "a retry or a restart). message_id is '<first vm_id>:create:<its attempt>[+<more VMs>]'; a VM may be sent "
    "more than once (after a crash or a broker outage) and schedulers place it once.",
    topology.VM_CREATE,
)
VM_ASSIGNED: Event[VmAssigned] = Event(
    topology.VM_ASSIGNED,
    VmAssigned,
    True,
    _batch("assigned", lambda m: [(a.vm_id, a.attempt) for a in m.assignments]),
    "VMs placed on hosts, those of one vm.create that found a host (published by a scheduler); PostgreSQL "
    "already records them. Each says whether it preempted (its create then waits for its victims' deletion). "
    "message_id is '<first vm_id>:assigned:<its attempt>[+<more VMs>]'.",
    topology.VM_ASSIGNED,
)
VM_UNSCHEDULABLE: Event[VmUnschedulable] = Event(
    topology.VM_UNSCHEDULABLE,
    VmUnschedulable,
    True,
    _batch("unschedulable", lambda m: [(vm.vm_id, vm.attempt) for vm in m.vms]),
    "VMs no host can take, those of one vm.create (published by a scheduler); each VM's rejections count "
    "hosts by the first rule that refused them. message_id is '<first vm_id>:unschedulable:<its attempt>"
    "[+<more VMs>]'.",
    topology.VM_UNSCHEDULABLE,
)
VM_WAITING: Event[VmWaiting] = Event(
    topology.VM_WAITING,
    VmWaiting,
    True,
    _batch("waiting", lambda m: [(vm.vm_id, vm.attempt) for vm in m.vms]),
    "VMs no host can take yet that may wait for room (wait_s), those of one vm.create (published by a "
    "scheduler): each is placed, oldest first, when capacity it fits appears (then vm.assigned, at the next "
    "attempt), or ends vm.unschedulable at its wait_until. message_id is '<first vm_id>:waiting:<its attempt>"
    "[+<more VMs>]'.",
    topology.VM_WAITING,
)
VM_DELETED: Event[VmDeleted] = Event(
    topology.VM_DELETED,
    VmDeleted,
    True,
    lambda m: f"{m.vm_id}:deleted",
    "The agent removed the VM; its capacity is free again (published by the gateway). message_id is '<vm_id>:deleted'.",
    topology.VM_DELETED,
)
VM_ORPHANED: Event[VmOrphaned] = Event(
    topology.VM_ORPHANED,
    VmOrphaned,
    True,
    lambda m: f"{m.vm_id}:orphaned:{m.host_id}",
    "An agent runs a VM vmsched does not hold on that host (published by the gateway): 'moved' when vmsched "
    "holds it elsewhere now, 'gone' when nowhere; 'deleted' says whether the agent was told to delete it "
    "(VMSCHED_ORPHAN_VMS). message_id is '<vm_id>:orphaned:<host_id>'.",
    topology.VM_ORPHANED,
)
VM_PREEMPTED: Event[VmPreempted] = Event(
    topology.VM_PREEMPTED,
    VmPreempted,
    True,
    lambda m: f"{m.vm_id}:preempted:{m.preempted_by}",
    "A VM of higher priority that fit nowhere took this VM's room (published by a scheduler, once PostgreSQL "
    "records both): its capacity is the preemptor's, its agent is told to delete it, then its restart policy "
    "applies. message_id is '<vm_id>:preempted:<preempted_by>'.",
    topology.VM_PREEMPTED,
)
VM_MIGRATE: Event[VmMigrate] = Event(
    topology.VM_MIGRATE,
    VmMigrate,
    True,
    lambda m: f"{m.vm.vm_id}:migrate:{m.migration}",
    "A running VM to move (published by the API for POST /v1/vms/{id}/migrate, and again by the gateway if no "
    "scheduler answered within VMSCHED_RESEND_STALE_AFTER): a scheduler chooses the target by every rule of "
    "the VM, its source excluded, claims it and commits it. message_id is '<vm_id>:migrate:<migration>'.",
    topology.VM_MIGRATE,
)
VM_MIGRATING: Event[VmMigrating] = Event(
    topology.VM_MIGRATING,
    VmMigrating,
    True,
    lambda m: f"{m.vm_id}:migrating:{m.migration}",
    "A scheduler claimed the migration's target (from: the source, to: the target): the VM holds capacity on "
    "both hosts until it runs on the target (vm.migrated) or the migration is rolled back "
    "(vm.migration_failed). The gateway tells the target to prepare. message_id is "
    "'<vm_id>:migrating:<migration>'.",
    topology.VM_MIGRATING,
)
VM_MIGRATED: Event[VmMigrated] = Event(
    topology.VM_MIGRATED,
    VmMigrated,
    True,
    lambda m: f"{m.vm_id}:migrated:{m.migration}",
    "The VM runs on its new host (to); the old one's (from) capacity is free again (published by the gateway). "
    "message_id is '<vm_id>:migrated:<migration>'.",
    topology.VM_MIGRATED,
)
VM_MIGRATION_FAILED: Event[VmMigrationFailed] = Event(
    topology.VM_MIGRATION_FAILED,
    VmMigrationFailed,
    True,
    lambda m: f"{m.vm_id}:migration_failed:{m.migration}",
    "The migration was rolled back, or no host could take the VM: it runs on its source (from) still, and a "
    "target claimed for it (to, null if none was) is free again; reason and detail say why (published by a "
    "scheduler when no host fits, by the gateway when a step failed or timed out). message_id is "
    "'<vm_id>:migration_failed:<migration>'.",
    topology.VM_MIGRATION_FAILED,
)
VM_STATUS: Event[VmStatusReport] = Event(
    topology.VM_STATUS,
    VmStatusReport,
    True,
    status_message_id,
    "An agent reports what became of a command: running, failed or deleted (published by agents, read by the "
    "gateway). message_id is '<vm_id>:<status>:<attempt>' for a create or a delete, "
    "'<vm_id>:<action>:<status>:m<migration>' for a migration's step, '<vm_id>:<action>:<status>:<attempt>' "
    "for a stop or a start.",
    topology.VM_STATUS,
)
AGENT_HEARTBEAT: Event[AgentHeartbeat] = Event(
    topology.AGENT_HEARTBEAT,
    AgentHeartbeat,
    False,
    None,
    "An agent is alive and offers this capacity (published by agents every VMSCHED_AGENT_HEARTBEAT_INTERVAL "
    "seconds, not persistent).",
    topology.AGENT_HEARTBEAT,
)
AGENT_CONFLICT: Event[AgentConflict] = Event(
    topology.AGENT_CONFLICT,
    AgentConflict,
    True,
    lambda m: f"{m.host_id}:conflict:{m.instance_id}",
    "A second agent process (another instance_id) sent heartbeats for a host while the instance holding its id "
    "was online (published by the gateway); they were refused and dead-lettered, the host left as it was. At "
    "most one a minute per host and refused instance. message_id is '<host_id>:conflict:<refused instance_id>'.",
    topology.AGENT_CONFLICT,
)
HOST_FENCED: Event[HostFenced] = Event(
    topology.HOST_FENCED,
    HostFenced,
    True,
    lambda m: f"{m.host_id}:fenced:{m.at.isoformat()}",
    "A host is declared down (published by the API for an operator's fence, by the gateway when "
    "VMSCHED_FENCE_COMMAND succeeded): its VMs are failed and their restart policy applies; it takes no VM until "
    "DELETE /v1/hosts/{id}/fence. message_id is '<host_id>:fenced:<at>'.",
    topology.HOST_FENCED,
)
HOST_FENCE_FAILED: Event[HostFenceFailed] = Event(
    topology.HOST_FENCE_FAILED,
    HostFenceFailed,
    True,
    lambda m: f"{m.host_id}:fence_failed:{m.at.isoformat()}",
    "VMSCHED_FENCE_COMMAND did not fence a lost host (published by the gateway): its VMs stay unknown until an "
    "operator fences it or it comes back. message_id is '<host_id>:fence_failed:<at>'.",
    topology.HOST_FENCE_FAILED,
)
HOST_FENCE_NEEDED: Event[HostFenceNeeded] = Event(
    topology.HOST_FENCE_NEEDED,
    HostFenceNeeded,
    True,
    lambda m: f"{m.host_id}:fence_needed:{m.at.isoformat()}",
    "A host is lost, no fence command is set and VMSCHED_RESTART_UNFENCED is false (published by the gateway): "
    "its VMs stay unknown until an operator fences it or it comes back. message_id is "
    "'<host_id>:fence_needed:<at>'.",
    topology.HOST_FENCE_NEEDED,
)
AGENT_COMMAND: Event[AgentCommand] = Event(
    "agent.<host id>",
    AgentCommand,
    False,
    command_message_id,
    "A command for one host's agent (published by the gateway, and by the API for deletes, stops, starts) on "
    "the direct exchange vmsched.agents, routing key = the host id, into the host's queue agent.<host id>. Not "
    "persistent: one a broker restart loses is sent again after VMSCHED_RESEND_STALE_AFTER. message_id is "
    "'<vm_id>:<action>-command:<attempt>' ('m<migration>' instead of the attempt for a migration's command); "
    "an agent carries out a repeat once.",
    exchange=topology.AGENTS_EXCHANGE,
)

EVENTS: tuple[Event[Any], ...] = (
    VM_CREATE,
    VM_ASSIGNED,
    VM_UNSCHEDULABLE,
    VM_WAITING,
    VM_DELETED,
    VM_ORPHANED,
    VM_PREEMPTED,
    VM_MIGRATE,
    VM_MIGRATING,
    VM_MIGRATED,
    VM_MIGRATION_FAILED,
    VM_STATUS,
    AGENT_HEARTBEAT,
    AGENT_CONFLICT,
    HOST_FENCED,
    HOST_FENCE_FAILED,
    HOST_FENCE_NEEDED,
    AGENT_COMMAND,
)


def declare_all(broker: RabbitBroker) -> None:
    """Declare every event on ``broker`` (for its AsyncAPI document; nothing is published)."""
    for event in EVENTS:
        event.declare(broker)
