"""Networks end to end on the real servers: hosts' heartbeats list the networks they reach (stored in
PostgreSQL and the Redis snapshot), a VM asking for networks (single or batch) goes only to a host
that reaches every one, and is unschedulable for ``network`` when none does; the what-if, capacity
and scheduling-info answers show them, and a migration's target must reach them too."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.moving import running, settled
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources
from vmsched_redis.snapshot import Snapshot

SUITE = f"net-{uuid.uuid4().hex[:6]}"
# The host reaching only vlan-100 has the lowest id: ties (equally empty hosts) would go to it.
NARROW, WIDE_1, WIDE_2 = f"{SUITE}-a", f"{SUITE}-b", f"{SUITE}-c"
NETWORKS = {NARROW: ["vlan-100"], WIDE_1: ["vlan-100", "vlan-200"], WIDE_2: ["vlan-200", "vlan-100"]}
VM: dict[str, Any] = {"cpu": 1, "memory_mb": 512, "disk_gb": 1, "labels": {"suite": SUITE}}


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = [
        HostSpec(
            id=host_id,
            capacity=Resources(cpu=8, memory_mb=16384, disk_gb=100),
            labels={"suite": SUITE},
            networks=networks,
        )
        for host_id, networks in NETWORKS.items()
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running_fleet:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"] in NETWORKS and h["status"] == "online") == 3,
                timeout=60,
                what="the network fleet online",
            )
        yield running_fleet


@pytest.fixture
async def api(stack: Stack, fleet: SimulatedFleet) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


async def _decided(api: httpx.AsyncClient, vm_id: str) -> dict[str, Any]:
    found = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] not in ("pending", "scheduled"),
        timeout=30,
        what=f"{vm_id} decided",
    )
    vm: dict[str, Any] = found.json()
    return vm


async def test_networks_are_validated_and_kept_with_the_vm(api: httpx.AsyncClient) -> None:
    body = {"name": f"{SUITE}-v", **VM, "labels": {"suite": "no-such-host"}}
    twice = await api.post("/v1/vms", json={**body, "networks": ["vlan-100", "vlan-100"]})
    assert twice.status_code == 422
    assert twice.json()["detail"][0]["loc"][:2] == ["body", "networks"]
    assert "named twice" in twice.json()["detail"][0]["msg"]
    bad = await api.post("/v1/vms", json={**body, "networks": ["no spaces"]})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"][:3] == ["body", "networks", 0]
    created = await api.post("/v1/vms", json={**body, "networks": ["vlan-200", "vlan-100"]})
    assert created.status_code == 202, created.text
    assert (await api.get(f"/v1/vms/{created.json()['id']}")).json()["networks"] == ["vlan-200", "vlan-100"]


async def test_hosts_show_the_networks_their_heartbeats_list_in_postgresql_and_the_snapshot(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    for host_id, networks in NETWORKS.items():
        assert (await api.get(f"/v1/hosts/{host_id}")).json()["networks"] == sorted(networks)
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    try:
        snapshot = Snapshot(redis, servers.redis_key_prefix)
        read = await snapshot.read_hosts(sorted(NETWORKS))
        found = {host_id: host.networks for host_id, host in read.items() if host is not None}
    finally:
        await redis.aclose()
    assert found == {host_id: tuple(sorted(networks)) for host_id, networks in NETWORKS.items()}
    info = await api.get(f"/v1/hosts/{WIDE_1}/scheduling-info")
    assert "Networks: vlan-100, vlan-200" in info.text.splitlines()
    as_json = await api.get(f"/v1/hosts/{WIDE_1}/scheduling-info", headers={"Accept": "application/json"})
    assert as_json.json()["networks"] == ["vlan-100", "vlan-200"]


async def test_a_vm_goes_only_to_a_host_reaching_its_networks_and_none_is_unschedulable_for_network(
    api: httpx.AsyncClient,
) -> None:
    created = await api.post("/v1/vms", json={"name": f"{SUITE}-one", **VM, "networks": ["vlan-200"]})
    assert created.status_code == 202, created.text
    vm = await _decided(api, created.json()["id"])
    assert vm["hypervisor_id"] in (WIDE_1, WIDE_2), vm
    decision = (await api.get(f"/v1/vms/{vm['id']}/placement")).json()["decision"]
    assert decision["rejections"]["network"] >= 1  # NARROW, at least (other modules' hosts reach none)

    batch = await api.post(
        "/v1/vms/batch",
        json={"vms": [{"name": f"{SUITE}-b{n}", **VM, "networks": ["vlan-100", "vlan-200"]} for n in range(4)]},
    )
    assert batch.status_code == 202, batch.text
    placed = [await _decided(api, item["id"]) for item in batch.json()["items"]]
    assert {each["hypervisor_id"] for each in placed} <= {WIDE_1, WIDE_2}, placed

    nowhere = await api.post("/v1/vms", json={"name": f"{SUITE}-none", **VM, "networks": ["storage"]})
    refused = await _decided(api, nowhere.json()["id"])
    assert refused["status"] == "unschedulable", refused
    decision = (await api.get(f"/v1/vms/{refused['id']}/placement")).json()["decision"]
    assert decision["reason"] == "network"
    examples = {example["host"]: example["reason"] for example in decision["examples"]["network"]}
    for host_id in examples.keys() & NETWORKS.keys():
        assert examples[host_id] == "network: host does not reach storage"


async def test_what_if_and_capacity_count_only_hosts_reaching_the_networks(api: httpx.AsyncClient) -> None:
    simulated = await api.post(
        "/v1/placement/simulate",
        json={"vms": [{"name": f"{SUITE}-sim", **VM, "networks": ["vlan-200"]}]},
    )
    assert simulated.status_code == 200, simulated.text
    (placement,) = simulated.json()["placements"]
    assert placement["host"] in (WIDE_1, WIDE_2)
    assert placement["rejections"]["network"] >= 1

    capacity = await api.get("/v1/capacity", params={"cpu": 1, "memory_mb": 512, "network": ["vlan-200"]})
    assert capacity.status_code == 200, capacity.text
    assert capacity.json()["shape"]["networks"] == ["vlan-200"]
    rooms = {room["host"]: room for room in capacity.json()["hosts"] if room["host"] in NETWORKS}
    assert (rooms[NARROW]["fits"], rooms[NARROW]["refused_by"]) == (0, "network")
    assert rooms[WIDE_1]["fits"] > 0
    assert rooms[WIDE_2]["fits"] > 0


async def test_a_migration_target_must_reach_the_vms_networks(api: httpx.AsyncClient) -> None:
    vm = await running(api, {"name": f"{SUITE}-mover", **VM, "networks": ["vlan-200"]})
    source = vm["hypervisor_id"]
    other = WIDE_2 if source == WIDE_1 else WIDE_1
    # Named: a host that does not reach vlan-200 is refused by the rule, with the reason.
    response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": NARROW})
    assert response.status_code == 202, response.text
    after = await settled(api, vm["id"])
    assert after["hypervisor_id"] == source
    assert "network" in after["status_reason"], after["status_reason"]
    # Chosen by the engine: the only other host reaching vlan-200, whatever NARROW's lower id.
    response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={})
    assert response.status_code == 202, response.text
    moved = await settled(api, vm["id"])
    assert moved["hypervisor_id"] == other, moved
