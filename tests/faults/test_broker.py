"""A broker restart in the middle of a run (``rabbitmqctl stop_app`` / ``start_app``): no accepted VM
is lost, nothing is placed twice, and every consumer comes back (the aio-pika/FastStream pitfall of a
reconnected connection without its consumers).

The broker restarted is a RabbitMQ node of this module's own (devtools.broker_node), beside the local
one: whatever else uses the local broker while the suite runs goes on undisturbed."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from devtools.broker_node import broker_node
from devtools.stack import Stack
from tests.faults.conftest import fault_stack, mixed_vm, online_fleet, submit, wait_running, wait_settled
from tests.faults.invariants import check
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

SUITE = "broker"
HOSTS = 20
VMS = 800
DURING_OUTAGE = 50
SCHEDULERS = 2
# Queue -> the consumers it must have again after the restart.
CONSUMERS = {
    topology.SCHEDULER_QUEUE.name: SCHEDULERS,
    topology.GATEWAY_ASSIGNED_QUEUE.name: 1,
    topology.GATEWAY_STATUS_QUEUE.name: 1,
    topology.GATEWAY_HEARTBEAT_QUEUE.name: 1,
}


@pytest.fixture(scope="module")
def own_broker(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """This run's servers, but a RabbitMQ node of the module's own (a container's broker is already)."""
    if servers.private_broker:
        yield servers
        return
    with broker_node(f"vmsched-test-{servers.run_id}", tmp_path_factory.mktemp("broker-node")) as node:
        yield dataclasses.replace(servers, amqp_url=node.amqp_url, rabbitmqctl=node.rabbitmqctl)


@pytest.fixture(scope="module")
def broker_stack(own_broker: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Heartbeats cannot cross a stopped broker. The gateway does not fail VMs while no agent at all
    # is heard from (docs/operations.md), but on this loaded machine a short timeout could also see
    # single hosts lag behind after the restart; 60 s keeps the test about the broker.
    with fault_stack(
        own_broker,
        Path(tmp_path_factory.mktemp("broker-logs")),
        schedulers=SCHEDULERS,
        VMSCHED_AGENT_OFFLINE_TIMEOUT="60",
        VMSCHED_RESEND_STALE_AFTER="20",
        # The node of its own runs no management plugin, so agents cannot be enrolled: the test is about
        # the broker, not identity.
        VMSCHED_AGENT_AUTH="off",
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
async def broker_fleet(broker_stack: Stack, own_broker: Servers) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(
        broker_stack,
        own_broker,
        SUITE,
        HOSTS,
        Resources(cpu=128, memory_mb=128 * 1024, disk_gb=4000),
        heartbeat_interval=1.0,
        own_users=False,
    ) as fleet:
        yield fleet


def consumer_counts(servers: Servers) -> dict[str, int]:
    """Consumers per queue as the broker lists them (``list_queues``' consumers column reads 0 for
    quorum queues on RabbitMQ 3.10, so count ``list_consumers`` rows)."""
    vhost = unquote(servers.amqp_url.rsplit("/", 1)[1]) or "/"
    output = servers.rabbitmqctl("list_consumers", "-p", vhost, "queue_name", "channel_pid")
    return dict(
        Counter(
            line.split("\t", 1)[0]
            for line in output.splitlines()
            if line.strip() and not line.startswith("queue_name\t")
        )
    )


async def test_a_broker_restart_mid_run_loses_no_accepted_vm(
    broker_stack: Stack, broker_fleet: SimulatedFleet, own_broker: Servers
) -> None:
    servers = own_broker
    rng = random.Random(11)
    before = consumer_counts(servers)
    assert all(before.get(q, 0) >= n for q, n in CONSUMERS.items()), {q: before.get(q) for q in CONSUMERS}
    async with broker_stack.async_client(timeout=60) as api:
        vm_ids = await submit(api, [mixed_vm(rng, i, SUITE) for i in range(VMS)])
        await wait_running(servers, vm_ids, 100)

        await asyncio.to_thread(servers.rabbitmqctl, "stop_app")
        try:
            # Accepted while the broker is down: committed to PostgreSQL, published by the outbox later.
            for i in range(DURING_OUTAGE):
                response = await api.post("/v1/vms", json=mixed_vm(rng, VMS + i, SUITE))
                assert response.status_code == 202, response.text
                vm_ids.append(response.json()["id"])
        finally:
            await asyncio.to_thread(servers.rabbitmqctl, "start_app")

        await eventually(
            lambda: asyncio.to_thread(consumer_counts, servers),
            lambda counts: all(counts.get(q, 0) >= n for q, n in CONSUMERS.items()),
            timeout=90,
            what=f"consumers back on {sorted(CONSUMERS)}",
            interval=1.0,
        )
        await wait_settled(servers, vm_ids, timeout=240)
        report = await check(servers.asyncpg_dsn, vm_ids, broker_fleet)
    print(f"broker restart: {len(vm_ids)} VMs ({DURING_OUTAGE} accepted during the outage) -> {report.by_status}")
    assert report.problems == []
    assert report.by_status.get("running", 0) == len(vm_ids)
