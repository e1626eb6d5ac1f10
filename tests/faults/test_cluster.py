"""A three-node RabbitMQ cluster that loses a node mid-run (kill -9) and gets it back.

The stack and the agents are given all three nodes in ``VMSCHED_AMQP_URL``. They connect to the
first node, the one killed: every connection must find another node, the quorum queues elect new
leaders there, and nothing accepted is lost, placed twice or overcommitted. The restarted node
rejoins and every quorum queue is back to three replicas in its Raft group.

While the node is down, every service and agent must be back on another node within seconds and
the heartbeats must flow: no reconnection may be refused because a classic queue lived on the dead
node (docs/deploy.md, "A broker cluster"). The agents' command queues do live there (the gateway
declared them while connected to it), so their commands wait for the node and the stale-command
sweep.

The cluster is this module's own (devtools.broker_cluster), beside the local broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import pytest

from devtools.broker_cluster import BrokerCluster, broker_cluster
from devtools.stack import Stack
from tests.faults.conftest import fault_stack, mixed_vm, online_fleet, submit, wait_settled
from tests.faults.invariants import check
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = [pytest.mark.slow, pytest.mark.own_servers, pytest.mark.timeout(900)]

SUITE = "cluster"
HOSTS = 40
SCHEDULERS = 2
# 5,000 VMs in three phases: before the kill, while a node is dead, after it rejoined.
PHASES = {"before": 1500, "during": 2000, "after": 1500}


@pytest.fixture(scope="module")
def cluster(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    if servers.private_broker:
        pytest.fail("the cluster test runs its own RabbitMQ nodes; it needs the local RabbitMQ packages")
    with broker_cluster(f"vmsched-test-{servers.run_id}", tmp_path_factory.mktemp("cluster")) as started:
        yield started


@pytest.fixture(scope="module")
def cluster_servers(servers: Servers, cluster: BrokerCluster) -> Servers:
    return dataclasses.replace(servers, amqp_url=cluster.amqp_url, rabbitmqctl=cluster.nodes[1].rabbitmqctl)


@pytest.fixture(scope="module")
def cluster_stack(cluster_servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Heartbeats must keep flowing while the node is down (asserted directly); the offline timeout is
    # twice the default only because this machine is shared, so a late fold is not a lost host.
    with fault_stack(
        cluster_servers,
        Path(tmp_path_factory.mktemp("cluster-logs")),
        schedulers=SCHEDULERS,
        VMSCHED_AGENT_OFFLINE_TIMEOUT="30",
        VMSCHED_RESEND_STALE_AFTER="10",
        # Its nodes run no management plugin, so agents cannot be enrolled: the test is about the broker,
        # not identity.
        VMSCHED_AGENT_AUTH="off",
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
async def cluster_fleet(cluster_stack: Stack, cluster_servers: Servers) -> AsyncIterator[SimulatedFleet]:
    async with online_fleet(
        cluster_stack,
        cluster_servers,
        SUITE,
        HOSTS,
        Resources(cpu=256, memory_mb=256 * 1024, disk_gb=8000),
        heartbeat_interval=1.0,
        own_users=False,
    ) as fleet:
        yield fleet


async def hosts_heard_since(servers: Servers, since: datetime) -> int:
    """Hosts of this suite whose last heartbeat PostgreSQL holds is later than ``since``."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM hosts WHERE id LIKE $1 AND last_heartbeat > $2", f"{SUITE}-%", since
        )
        return count
    finally:
        await conn.close()


@dataclasses.dataclass(frozen=True)
class Reconnection:
    service: str
    seconds: float | None  # from the kill to "broker connection restored"; None: not restored
    refused: int  # reconnection attempts RabbitMQ refused on a declaration (NOT_FOUND)


def reconnections(stack: Stack, killed_at: datetime) -> list[Reconnection]:
    """Each service's way back to the broker after the kill, from its log."""
    found = []
    for name in sorted(stack.services):
        restored: datetime | None = None
        refused = 0
        for line in stack.log_lines(name):
            stamp = line.get("timestamp")
            if not isinstance(stamp, str) or (at := datetime.fromisoformat(stamp.replace("Z", "+00:00"))) < killed_at:
                continue
            message = str(line.get("message", ""))
            if message == "broker connection restored" and restored is None:
                restored = at
            elif line.get("logger") == "aio_pika.robust_connection" and "NOT_FOUND" in message:
                refused += 1
        found.append(Reconnection(name, None if restored is None else (restored - killed_at).total_seconds(), refused))
    return found


async def placed(servers: Servers, vm_ids: list[str]) -> int:
    """VMs of ``vm_ids`` a scheduler has decided (a host chosen, or unschedulable)."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM vms WHERE id = ANY($1::uuid[]) AND status <> 'pending'", vm_ids
        )
        return count
    finally:
        await conn.close()


async def place_phase(
    api: httpx.AsyncClient, servers: Servers, rng: random.Random, phase: str, count: int
) -> tuple[list[str], float]:
    """Submit ``count`` VMs and wait until every one is decided; the ids and placements a second."""
    bodies = [mixed_vm(rng, i, f"{SUITE}-{phase}") | {"labels": {"suite": SUITE}} for i in range(count)]
    started = time.monotonic()
    vm_ids = await submit(api, bodies, batch=250)
    await eventually(
        lambda: placed(servers, vm_ids),
        lambda n: n == len(vm_ids),
        timeout=240,
        what=f"the {phase} phase's {count} VMs decided",
        interval=0.25,
    )
    return vm_ids, count / (time.monotonic() - started)


async def test_a_node_killed_and_restarted_loses_no_vm_and_every_quorum_queue_regains_three_replicas(
    cluster: BrokerCluster, cluster_stack: Stack, cluster_fleet: SimulatedFleet, cluster_servers: Servers
) -> None:
    servers = cluster_servers
    rng = random.Random(17)
    victim = cluster.nodes[0]  # the node every client tried first: all their connections die with it
    rates: dict[str, float] = {}
    vm_ids: list[str] = []
    async with cluster_stack.async_client(timeout=120) as api:
        ids, rates["before"] = await place_phase(api, servers, rng, "before", PHASES["before"])
        vm_ids += ids

        killed_at = datetime.now(UTC)
        victim.kill()
        await eventually(
            lambda: asyncio.to_thread(cluster.running_nodes),
            lambda n: n == 2,
            timeout=60,
            what="the cluster seeing one node gone",
        )
        # Every agent and the gateway back on a surviving node: heartbeats folded again.
        down_since = datetime.now(UTC)
        await eventually(
            lambda: hosts_heard_since(servers, down_since),
            lambda n: n == HOSTS,
            timeout=30,
            what="every host's heartbeat folded while the node is down",
            interval=1.0,
        )
        ids, rates["during"] = await place_phase(api, servers, rng, "during", PHASES["during"])
        vm_ids += ids
        back = reconnections(cluster_stack, killed_at)

        await asyncio.to_thread(victim.start)
        await eventually(
            lambda: asyncio.to_thread(cluster.quorum_queues),
            lambda queues: bool(queues) and all(q.members == 3 and q.online == 3 for q in queues),
            timeout=120,
            what="every quorum queue back to three replicas online",
            interval=1.0,
        )
        ids, rates["after"] = await place_phase(api, servers, rng, "after", PHASES["after"])
        vm_ids += ids

        await wait_settled(servers, vm_ids, timeout=300)
        report = await check(servers.asyncpg_dsn, vm_ids, cluster_fleet)
    queues = await asyncio.to_thread(cluster.quorum_queues)
    print(
        f"\nbroker cluster, node {victim.node} killed -9 and restarted: {len(vm_ids)} VMs -> {report.by_status}; "
        + ", ".join(f"{phase} {rate:.0f} placements/s" for phase, rate in rates.items())
        + "; back on another node after: "
        + ", ".join(f"{r.service} {'never' if r.seconds is None else f'{r.seconds:.1f} s'}" for r in back)
        + f"; quorum queues: {[(q.name, q.members, q.online) for q in queues]}"
    )
    assert [r for r in back if r.refused or r.seconds is None] == []
    assert report.problems == []
    assert report.by_status.get("running", 0) == len(vm_ids)
    assert len(vm_ids) == sum(PHASES.values())
