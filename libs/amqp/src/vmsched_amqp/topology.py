"""The AMQP topology, declared once: exchanges, queues, routing keys.

Every service imports these objects; nobody spells a queue or exchange name anywhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from faststream.rabbit import ExchangeType, QueueType, RabbitExchange, RabbitQueue

if TYPE_CHECKING:
    from faststream.rabbit.schemas.queue import ClassicQueueArgs, QuorumQueueArgs, StreamQueueArgs

EXCHANGE = RabbitExchange("vmsched", type=ExchangeType.TOPIC, durable=True)
AGENTS_EXCHANGE = RabbitExchange("vmsched.agents", type=ExchangeType.DIRECT, durable=True)
DEAD_LETTER_EXCHANGE = RabbitExchange("vmsched.dlx", type=ExchangeType.TOPIC, durable=True)

VM_CREATE = "vm.create"
VM_ASSIGNED = "vm.assigned"
VM_UNSCHEDULABLE = "vm.unschedulable"
VM_WAITING = "vm.waiting"
VM_STATUS = "vm.status"
VM_DELETED = "vm.deleted"
VM_ORPHANED = "vm.orphaned"
VM_PREEMPTED = "vm.preempted"
VM_MIGRATE = "vm.migrate"
VM_MIGRATING = "vm.migrating"
VM_MIGRATED = "vm.migrated"
VM_MIGRATION_FAILED = "vm.migration_failed"
AGENT_HEARTBEAT = "agent.heartbeat"
AGENT_CONFLICT = "agent.conflict"
HOST_FENCED = "host.fenced"
HOST_FENCE_FAILED = "host.fence_failed"
HOST_FENCE_NEEDED = "host.fence_needed"

# Header a consumer sets when it dead-letters a message itself, saying why.
DEAD_LETTER_REASON_HEADER = "x-vmsched-dead-letter-reason"
DEAD_LETTER_QUEUE_HEADER = "x-vmsched-dead-letter-queue"
DEFAULT_DELIVERY_LIMIT = 5


def dead_letter_arguments(delivery_limit: int = DEFAULT_DELIVERY_LIMIT) -> dict[str, Any]:
    return {"x-dead-letter-exchange": DEAD_LETTER_EXCHANGE.name, "x-delivery-limit": delivery_limit}


def consumer_queue(name: str, routing_key: str, delivery_limit: int = DEFAULT_DELIVERY_LIMIT) -> RabbitQueue:
    """A quorum queue a service consumes: survives broker restarts, dead-letters poison messages."""
    return RabbitQueue(
        name,
        queue_type=QueueType.QUORUM,
        durable=True,
        routing_key=routing_key,
        arguments=cast("QuorumQueueArgs", dead_letter_arguments(delivery_limit)),
    )


def disposable_queue(name: str, routing_key: str, max_length: int) -> RabbitQueue:
    """A queue of messages that the next one replaces (heartbeats): the oldest dropped beyond
    ``max_length``, no dead-lettering, consumed without acks. A quorum queue, so that it lives on
    every node of a cluster: a classic one lives on one node, and while that node is down every
    client that declared it fails to reconnect (RabbitMQ answers its declaration with NOT_FOUND,
    "home node ... is down"; docs/deploy.md, "A broker cluster"). Its replicated log costs the
    broker about twice the CPU a message of a classic queue (990 against 428 us at 333 a second,
    bench/broker_floor.py's method); a non-durable classic queue, re-created on whichever node
    survives, would not, but RabbitMQ 4.3 refuses non-durable shared queues by default
    (``transient_nonexcl_queues``)."""
    return RabbitQueue(
        name,
        queue_type=QueueType.QUORUM,
        durable=True,
        routing_key=routing_key,
        arguments=cast("QuorumQueueArgs", {"x-max-length": max_length, "x-overflow": "drop-head"}),
    )


SCHEDULER_QUEUE = consumer_queue("scheduler.vm-create", VM_CREATE)
# Room for a heartbeat of every host of a 100,000-host fleet; older ones are worthless.
GATEWAY_HEARTBEAT_QUEUE = disposable_queue("gateway.heartbeats", AGENT_HEARTBEAT, max_length=100_000)
GATEWAY_ASSIGNED_QUEUE = consumer_queue("gateway.vm-assigned", VM_ASSIGNED)
GATEWAY_STATUS_QUEUE = consumer_queue("gateway.vm-status", VM_STATUS)
SCHEDULER_MIGRATE_QUEUE = consumer_queue("scheduler.vm-migrate", VM_MIGRATE)
GATEWAY_MIGRATING_QUEUE = consumer_queue("gateway.vm-migrating", VM_MIGRATING)
# Quorum for the same reason as the heartbeats' queue. Before, it was classic; RabbitMQ cannot change
# a queue's type, so an old classic one is kept until an operator moves it (dead_letters.py).
DEAD_LETTER_QUEUE = RabbitQueue("vmsched.dead-letters", queue_type=QueueType.QUORUM, durable=True, routing_key="#")
# Every VM event, kept for GET /v1/events (server-sent events, docs/events.md): a stream, which a
# consumer reads from any offset without taking messages from anyone, so that every API replica
# serves the same history with the same ids (the offsets) and a client resumes on any of them with
# Last-Event-ID. Kept 7 days or 2 GB, whichever ends first (segments of 100 MB are dropped whole).
# Declared by the API alone (its only reader): once declared it records events while every API
# replica is down, and the other services never fail to start over it.
EVENTS_STREAM = RabbitQueue(
    "vmsched.events",
    queue_type=QueueType.STREAM,
    durable=True,
    routing_key="vm.*",
    arguments=cast(
        "StreamQueueArgs",
        {"x-max-age": "7D", "x-max-length-bytes": 2_000_000_000, "x-stream-max-segment-size-bytes": 100_000_000},
    ),
)
# Every queue a vmsched service consumes from the ``vmsched`` exchange, each bound by its routing key.
CONSUMER_QUEUES = (
    SCHEDULER_QUEUE,
    GATEWAY_HEARTBEAT_QUEUE,
    GATEWAY_ASSIGNED_QUEUE,
    GATEWAY_STATUS_QUEUE,
    SCHEDULER_MIGRATE_QUEUE,
    GATEWAY_MIGRATING_QUEUE,
)
# Queues whose messages may be thrown away: one an older version declared with other arguments is
# deleted and declared again (gateway.heartbeats was quorum, then classic, now quorum again).
DISPOSABLE_QUEUES = (GATEWAY_HEARTBEAT_QUEUE,)


def agent_queue_name(host_id: str) -> str:
    return f"agent.{host_id}"


def agent_queue(host_id: str, *, declare: bool = True) -> RabbitQueue:
    """The per-host command queue. Classic and durable: one per hypervisor, thousands of them, and a
    quorum queue costs the broker about ten times the memory of a classic one (315 against 31 KB
    over a 3-node cluster) and CPU even idle (0.24 of a core for 1,000 of them) (docs/deploy.md, "A
    broker cluster"). It lives on one node, so neither the gateway nor an agent keeps it among
    what a reconnecting connection declares again. The gateway declares it; agents bind passively
    (``declare=False``)."""
    return RabbitQueue(
        agent_queue_name(host_id),
        durable=True,
        declare=declare,
        routing_key=host_id,
        arguments=cast("ClassicQueueArgs", agent_queue_arguments()),
    )


def agent_queue_arguments() -> dict[str, Any]:
    return {"x-dead-letter-exchange": DEAD_LETTER_EXCHANGE.name}
