"""The AMQP topology, declared once: exchanges, queues, routing keys.

Every service imports these objects; nobody spells a queue or exchange name anywhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from faststream.rabbit import ExchangeType, QueueType, RabbitExchange, RabbitQueue

if TYPE_CHECKING:
    from faststream.rabbit.schemas.queue import ClassicQueueArgs, QuorumQueueArgs

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
VM_MIGRATE = "vm.migrate"
VM_MIGRATING = "vm.migrating"
VM_MIGRATED = "vm.migrated"
VM_MIGRATION_FAILED = "vm.migration_failed"
AGENT_HEARTBEAT = "agent.heartbeat"

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
    """A queue of messages that the next one replaces (heartbeats): classic and durable, its messages
    transient, the oldest dropped beyond ``max_length``. A quorum queue's replicated log would cost
    the broker twice as much a message (990 against 428 us at 333 a second, bench/broker_floor.py's
    method) for data nobody needs after the next heartbeat."""
    return RabbitQueue(
        name,
        durable=True,
        routing_key=routing_key,
        arguments=cast("ClassicQueueArgs", {"x-max-length": max_length, "x-overflow": "drop-head"}),
    )


SCHEDULER_QUEUE = consumer_queue("scheduler.vm-create", VM_CREATE)
# Room for a heartbeat of every host of a 100,000-host fleet; older ones are worthless.
GATEWAY_HEARTBEAT_QUEUE = disposable_queue("gateway.heartbeats", AGENT_HEARTBEAT, max_length=100_000)
GATEWAY_ASSIGNED_QUEUE = consumer_queue("gateway.vm-assigned", VM_ASSIGNED)
GATEWAY_STATUS_QUEUE = consumer_queue("gateway.vm-status", VM_STATUS)
SCHEDULER_MIGRATE_QUEUE = consumer_queue("scheduler.vm-migrate", VM_MIGRATE)
GATEWAY_MIGRATING_QUEUE = consumer_queue("gateway.vm-migrating", VM_MIGRATING)
DEAD_LETTER_QUEUE = RabbitQueue("vmsched.dead-letters", durable=True, routing_key="#")
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
# deleted and declared again (a quorum gateway.heartbeats, before it became classic).
DISPOSABLE_QUEUES = (GATEWAY_HEARTBEAT_QUEUE,)


def agent_queue_name(host_id: str) -> str:
    return f"agent.{host_id}"


def agent_queue(host_id: str, *, declare: bool = True) -> RabbitQueue:
    """The per-host command queue. Classic and durable: one per hypervisor, thousands of them, so
    a Raft group each (quorum) would cost more than it protects. The gateway declares it; agents
    bind passively (``declare=False``)."""
    return RabbitQueue(
        agent_queue_name(host_id),
        durable=True,
        declare=declare,
        routing_key=host_id,
        arguments={"x-dead-letter-exchange": DEAD_LETTER_EXCHANGE.name},
    )
