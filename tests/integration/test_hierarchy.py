"""The hierarchy's rules end to end on the real servers: the ``cluster_first`` planner places within
the cluster with the most free capacity (CloudStack's FirstFitPlanner), and a VM whose creates failed
on VMSCHED_EXCLUDE_CLUSTER_AFTER (2, the stack's default) hosts of one cluster avoids that cluster."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

SUITE = f"hier-{uuid.uuid4().hex[:6]}"
# Cluster c1: three small hosts (24 vCPUs free in all) with the lowest ids; c2: one big host (32).
A, B, C, D = (f"{SUITE}-{letter}" for letter in "abcd")
CLUSTERS = {A: "c1", B: "c1", C: "c1", D: "c2"}
VM: dict[str, Any] = {"cpu": 1, "memory_mb": 256, "disk_gb": 1, "labels": {"suite": SUITE}, "strategy": "first_fit"}


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = [
        HostSpec(
            id=host_id,
            capacity=Resources(cpu=32 if host_id == D else 8, memory_mb=65536, disk_gb=100),
            labels={"suite": SUITE, "zone": "z1", "pod": "p1", "cluster": f"{SUITE}-{cluster}"},
        )
        for host_id, cluster in CLUSTERS.items()
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running_fleet:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"] in CLUSTERS and h["status"] == "online") == 4,
                timeout=60,
                what="the hierarchy fleet online",
            )
        yield running_fleet


@pytest.fixture
async def api(stack: Stack, fleet: SimulatedFleet) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


async def _settled(api: httpx.AsyncClient, name: str, **asked: Any) -> dict[str, Any]:
    created = await api.post("/v1/vms", json={"name": f"{SUITE}-{name}", **VM, **asked})
    assert created.status_code == 202, created.text
    found = await eventually(
        lambda: api.get(f"/v1/vms/{created.json()['id']}"),
        lambda r: r.json()["status"] in ("running", "failed", "unschedulable"),
        timeout=60,
        what=f"{name} settled",
    )
    vm: dict[str, Any] = found.json()
    return vm


async def test_cluster_first_places_in_the_cluster_with_the_most_free_capacity(api: httpx.AsyncClient) -> None:
    flat = await _settled(api, "flat")
    assert (flat["hypervisor_id"], flat["planner"]) == (A, "flat"), flat
    planned = await _settled(api, "planned", planner="cluster_first")
    assert (planned["hypervisor_id"], planned["planner"]) == (D, "cluster_first"), planned
    decision = (await api.get(f"/v1/vms/{planned['id']}/placement")).json()["decision"]
    assert decision["cluster"] == f"{SUITE}-c2"
    assert decision["eligible"] >= 4
    # The what-if plans the same way.
    simulated = await api.post(
        "/v1/placement/simulate", json={"vms": [{"name": f"{SUITE}-sim", **VM, "planner": "cluster_first"}]}
    )
    assert simulated.json()["placements"][0]["host"] == D
    bad = await api.post("/v1/vms", json={"name": f"{SUITE}-bad", **VM, "planner": "deepest"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "planner"]


async def test_a_vm_that_failed_on_two_hosts_of_a_cluster_avoids_the_cluster(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    for host_id in (A, B):
        fleet.hypervisors[host_id].fail_rate = 1.0
    try:
        vm = await _settled(api, "retried")
    finally:
        for host_id in (A, B):
            fleet.hypervisors[host_id].fail_rate = 0.0
    # first_fit: A, then B (A excluded), then not C (its cluster holds both failures) but D.
    assert (vm["status"], vm["hypervisor_id"]) == ("running", D), vm
    assert [a["host"] for a in vm["attempts"] if a["outcome"] == "failed"] == [A, B]
    decision = (await api.get(f"/v1/vms/{vm['id']}/placement")).json()["decision"]
    assert decision["rejections"]["excluded"] >= 3  # A, B (failed) and C (their cluster)
