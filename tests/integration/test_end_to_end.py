"""The whole placement path on the real servers: HTTP -> vm.create -> scheduler -> PostgreSQL ->
vm.assigned -> gateway -> the host's own queue -> agent -> vm.status."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from aio_pika.abc import AbstractIncomingMessage
from prometheus_client.parser import text_string_to_metric_families

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.amqp_tools import publish_raw, wait_for_message
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import Profile, generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology
from vmsched_contract.messages import CommandAction, Resources

SUITE = "e2e"


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = generate_hosts(
        8,
        prefix="e2e",
        capacity=Resources(cpu=32, memory_mb=65536, disk_gb=500),
        profile=Profile.UNIFORM,
        labels={"suite": SUITE},
        seed=7,
    )
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"].startswith("e2e") and h["status"] == "online") == 8,
                timeout=60,
                what="8 hosts online",
            )
        yield running


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


def vm_body(rng: random.Random, name: str) -> dict[str, object]:
    return {
        "name": name,
        "cpu": rng.choice([1, 2, 4]),
        "memory_mb": rng.choice([512, 1024, 2048, 4096]),
        "disk_gb": rng.choice([10, 20, 40]),
        "labels": {"suite": SUITE},
    }


async def test_fifty_vms_land_on_hosts_they_fit_and_their_agents_get_the_command(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    rng = random.Random(50)
    ids = []
    for i in range(50):
        response = await api.post("/v1/vms", json=vm_body(rng, f"e2e-{i}"))
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "pending"
        ids.append(response.json()["id"])

    async def statuses() -> dict[str, dict[str, object]]:
        found = await asyncio.gather(*(api.get(f"/v1/vms/{vm_id}") for vm_id in ids))
        return {r.json()["id"]: r.json() for r in found}

    vms = await eventually(
        statuses,
        lambda found: len(found) == 50 and all(vm["status"] == "running" for vm in found.values()),
        timeout=60,
        what="all 50 VMs running",
        interval=0.5,
    )

    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        rows = await conn.fetch("SELECT id::text, hypervisor_id, scheduled_at FROM vms WHERE id = ANY($1::uuid[])", ids)
        hosts = {r["id"]: r for r in await conn.fetch("SELECT * FROM hosts WHERE id LIKE 'e2e%'")}
    finally:
        await conn.close()
    assert len(rows) == 50
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for row in rows:
        vm = vms[row["id"]]
        assert row["hypervisor_id"] == vm["hypervisor_id"] is not None
        assert row["scheduled_at"] is not None
        # the command reached exactly that host's queue, and no other
        creates = [c for c in fleet.received(row["hypervisor_id"]) if str(c.vm_id) == row["id"]]
        assert [c.action for c in creates] == [CommandAction.CREATE]
        assert fleet.host_of(uuid.UUID(row["id"])) == row["hypervisor_id"]
        total = used[row["hypervisor_id"]]
        for index, key in enumerate(("cpu", "memory_mb", "disk_gb", "gpu")):
            total[index] += int(vm[key])  # type: ignore[call-overload]
    for host_id, total in used.items():
        host = hosts[host_id]
        assert total[0] <= host["cpu"]
        assert total[1] <= host["memory_mb"]
        assert total[2] <= host["disk_gb"]
        # PostgreSQL's allocation columns count at least the VMs this test put there
        assert host["alloc_cpu"] >= total[0]
        assert host["alloc_memory_mb"] >= total[1]


async def test_a_vm_no_host_can_take_is_unschedulable_with_reasons(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    body = {"name": "huge", "cpu": 1000, "memory_mb": 1024, "disk_gb": 1, "labels": {"suite": SUITE}}
    vm_id = (await api.post("/v1/vms", json=body)).json()["id"]
    vm = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] == "unschedulable",
        timeout=30,
        what="the VM to be unschedulable",
    )
    assert vm.json()["status_reason"].startswith("cpu: none of ")
    decision = (await api.get(f"/v1/vms/{vm_id}/placement")).json()["decision"]
    assert decision["reason"] == "cpu"
    assert decision["rejections"]["cpu"] >= 8
    examples = decision["examples"]["cpu"]
    assert len(examples) == 3
    assert all(example["reason"].startswith("cpu: needs 1000, ") for example in examples)


async def test_delete_releases_the_capacity_when_the_agent_confirms(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    vm = (await api.post("/v1/vms", json=vm_body(random.Random(1), "to-delete"))).json()
    running = await eventually(
        lambda: api.get(f"/v1/vms/{vm['id']}"), lambda r: r.json()["status"] == "running", timeout=30, what="running"
    )
    host_id = running.json()["hypervisor_id"]
    before = (await api.get(f"/v1/hosts/{host_id}")).json()["allocated"]
    assert (await api.delete(f"/v1/vms/{vm['id']}")).json()["status"] == "deleting"
    await eventually(
        lambda: api.get(f"/v1/vms/{vm['id']}"), lambda r: r.json()["status"] == "deleted", timeout=30, what="deleted"
    )
    after = (await api.get(f"/v1/hosts/{host_id}")).json()["allocated"]
    assert after["cpu"] == before["cpu"] - vm["cpu"]
    assert after["memory_mb"] == before["memory_mb"] - vm["memory_mb"]
    assert fleet.host_of(uuid.UUID(vm["id"])) is None


async def test_a_paused_host_gets_no_new_vms(api: httpx.AsyncClient, fleet: SimulatedFleet) -> None:
    hosts = sorted(h["id"] for h in (await api.get("/v1/hosts")).json() if h["id"].startswith("e2e"))
    paused = hosts[0]
    assert (await api.patch(f"/v1/hosts/{paused}", json={"scheduling_paused": True})).json()["scheduling_paused"]
    try:
        rng = random.Random(3)
        ids = [(await api.post("/v1/vms", json=vm_body(rng, f"p-{i}"))).json()["id"] for i in range(10)]
        for vm_id in ids:
            placed = await eventually(
                lambda vm_id=vm_id: api.get(f"/v1/vms/{vm_id}"),  # type: ignore[misc]
                lambda r: r.json()["status"] in ("scheduled", "running"),
                timeout=30,
                what="placement",
            )
            assert placed.json()["hypervisor_id"] != paused
    finally:
        await api.patch(f"/v1/hosts/{paused}", json={"scheduling_paused": False})


async def dead_lettered(servers: Servers, routing_key: str, body: bytes) -> AbstractIncomingMessage:
    """Publish ``body`` as a ``routing_key`` message and wait for it in the dead-letter queue."""
    marker = f"poison-{uuid.uuid4()}"
    await publish_raw(
        servers.amqp_url, topology.EXCHANGE.name, routing_key, body, message_id=marker, content_type="application/json"
    )
    return await wait_for_message(servers.amqp_url, topology.DEAD_LETTER_QUEUE.name, lambda m: m.message_id == marker)


async def test_a_malformed_vm_create_is_dead_lettered_and_the_next_vm_still_schedules(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    dead = await dead_lettered(servers, topology.VM_CREATE, b'{"vms": [{"vm_id": "not-a-uuid", "name": 7}]}')
    reason = str(dead.headers[topology.DEAD_LETTER_REASON_HEADER])
    assert "vms.0.vm_id" in reason
    vm_id = (await api.post("/v1/vms", json=vm_body(random.Random(9), "after-poison"))).json()["id"]
    await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] == "running",
        timeout=30,
        what="the next VM to run",
    )


async def test_a_malformed_heartbeat_is_dead_lettered_and_heartbeats_still_count(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    dead = await dead_lettered(servers, topology.AGENT_HEARTBEAT, b'{"agent_id": 42, "capacity": "lots"}')
    reason = str(dead.headers[topology.DEAD_LETTER_REASON_HEADER])
    assert "agent_id" in reason
    assert "capacity" in reason
    assert dead.headers[topology.DEAD_LETTER_QUEUE_HEADER] == topology.GATEWAY_HEARTBEAT_QUEUE.name
    # The gateway goes on folding heartbeats: a host's last_heartbeat moves past this moment.
    before = (await api.get("/v1/hosts/e2e-0001")).json()["last_heartbeat"]
    await eventually(
        lambda: api.get("/v1/hosts/e2e-0001"),
        lambda r: r.json()["last_heartbeat"] > before,
        timeout=30,
        what="a newer heartbeat of e2e-0001",
    )


async def test_scheduling_info_is_the_seed_block_as_text_and_the_same_facts_as_json(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    text = (await api.get("/v1/hosts/e2e-0001/scheduling-info")).text.splitlines()
    assert text[0] == "Agent: e2e-0001"
    assert text[1] == "Status: online"
    assert text[2].startswith("CPU: ")
    assert "% used)" in text[2]
    assert text[3].startswith("Memory: ")
    assert " GB/" in text[3]
    assert text[4].startswith("Disk: ")
    assert text[5].startswith("Running VMs: ")
    facts = (await api.get("/v1/hosts/e2e-0001/scheduling-info", headers={"Accept": "application/json"})).json()
    assert facts["agent_id"] == "e2e-0001"
    assert facts["cpu_total"] == 32
    assert f"Running VMs: {facts['running_vms']}" in text
    assert (await api.get("/v1/hosts/nope/scheduling-info")).status_code == 404


async def test_a_placed_vm_explains_its_host_with_scores_and_the_others_with_reasons(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    vm_id = (await api.post("/v1/vms", json=vm_body(random.Random(11), "explained"))).json()["id"]
    placed = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"), lambda r: r.json()["hypervisor_id"] is not None, timeout=30, what="placed"
    )
    decision = (await api.get(f"/v1/vms/{vm_id}/placement")).json()["decision"]
    assert decision["strategy"] == "least_loaded"
    assert decision["host"] == placed.json()["hypervisor_id"]
    assert decision["considered"] >= 8
    assert decision["eligible"] >= 1
    # the chosen host first, then the runners-up, best first
    assert decision["candidates"][0] == {"host": decision["host"], "score": decision["score"]}
    scores = [candidate["score"] for candidate in decision["candidates"]]
    assert scores == sorted(scores)
    # hosts of other tests lack the suite label: counted under the labels rule
    assert sum(decision["rejections"].values()) == decision["considered"] - decision["eligible"]
    assert decision["decision_us"] > 0


async def test_the_runtime_default_strategy_reaches_the_schedulers(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    assert (await api.put("/v1/settings/scheduler", json={"default_strategy": "best_fit"})).status_code == 200
    try:

        async def placed_with() -> str | None:
            vm_id = (await api.post("/v1/vms", json=vm_body(random.Random(5), "strategy-probe"))).json()["id"]
            vm = await eventually(
                lambda: api.get(f"/v1/vms/{vm_id}"),
                lambda r: r.json()["hypervisor_id"] is not None,
                timeout=30,
                what="placed",
            )
            strategy: str | None = vm.json()["strategy"]
            return strategy

        await eventually(placed_with, lambda s: s == "best_fit", timeout=30, what="a VM placed with best_fit")
        explicit = await api.post("/v1/vms", json={**vm_body(random.Random(6), "own"), "strategy": "round_robin"})
        vm_id = explicit.json()["id"]
        await eventually(
            lambda: api.get(f"/v1/vms/{vm_id}"),
            lambda r: r.json()["strategy"] == "round_robin" and r.json()["hypervisor_id"] is not None,
            timeout=30,
            what="the VM's own strategy to be used",
        )
    finally:
        await api.put("/v1/settings/scheduler", json={"default_strategy": "least_loaded"})


async def test_a_vm_an_agent_runs_that_vmsched_holds_elsewhere_is_deleted_there_and_a_gone_one_only_reported(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers, stack: Stack
) -> None:
    """What a host cut off past VMSCHED_AGENT_LOST_TIMEOUT comes back with: VMs vmsched placed again
    elsewhere ("moved": deleted there, VMSCHED_ORPHAN_VMS=delete_moved) and VMs it failed ("gone":
    reported only). Its heartbeat lists them; the gateway finds them."""
    rng = random.Random(2)
    gateway_metrics = stack.services["gateway"].metrics_url
    assert gateway_metrics is not None
    # The gateway's counter is the stack's, shared with other tests: count what this one adds.
    gone_before = await _orphans_reported_gone(gateway_metrics)
    moved, gone = [(await api.post("/v1/vms", json=vm_body(rng, name))).json() for name in ("moved", "gone")]
    for vm in (moved, gone):
        await eventually(
            lambda vm=vm: api.get(f"/v1/vms/{vm['id']}"),  # type: ignore[misc]
            lambda r: r.json()["status"] == "running",
            timeout=30,
            what="running",
        )
    hosts = {vm["id"]: fleet.host_of(uuid.UUID(vm["id"])) for vm in (moved, gone)}
    elsewhere = next(h for h in sorted(fleet.hypervisors) if h != hosts[moved["id"]])
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        async with conn.transaction():  # as if vmsched had failed both while their hosts were cut off
            await conn.execute(
                "UPDATE vms SET hypervisor_id = $2, updated_at = now() WHERE id = $1", uuid.UUID(moved["id"]), elsewhere
            )
            await conn.execute(
                "UPDATE vms SET status = 'failed', updated_at = now() WHERE id = $1", uuid.UUID(gone["id"])
            )
    finally:
        await conn.close()

    await eventually(
        lambda: _async(fleet.host_of(uuid.UUID(moved["id"]))),
        lambda host: host is None,
        timeout=20,
        what="the moved VM's copy deleted from its old host",
    )
    await eventually(
        lambda: _orphans_reported_gone(gateway_metrics),
        lambda count: count == gone_before + 1,
        timeout=30,
        what="the gone VM reported",
    )
    assert fleet.host_of(uuid.UUID(gone["id"])) == hosts[gone["id"]]  # left running: only reported
    deletes = [c for c in fleet.received(hosts[gone["id"]] or "") if c.vm_id == uuid.UUID(gone["id"])]
    assert [c.action for c in deletes] == [CommandAction.CREATE]
    assert (await api.get(f"/v1/vms/{gone['id']}")).json()["status"] == "failed"  # it stays what vmsched decided


async def _async(value: str | None) -> str | None:
    return value


async def _orphans_reported_gone(metrics_url: str) -> float:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(metrics_url)).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vmsched_orphan_vms_total" and sample.labels == {"action": "reported", "kind": "gone"}:
                return float(sample.value)
    return 0.0  # not exported before the first
