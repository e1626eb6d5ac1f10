"""The seeds' allocators end to end on the real servers: first_fit (CloudStack's FirstFitAllocator),
fewest_vms and most_vms (Orchard's DistributeLoad and OptimizeUtilization) and user_concentrated
(CloudStack's UserConcentratedPodAllocator), per request and as the runtime default; the what-if
and the replay decide as the scheduler did."""

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

SUITE = f"alloc-{uuid.uuid4().hex[:6]}"
POD_1, POD_2 = f"{SUITE}-p1", f"{SUITE}-p2"
HOSTS = {f"{SUITE}-a": POD_1, f"{SUITE}-b": POD_1, f"{SUITE}-c": POD_2, f"{SUITE}-d": POD_2}
A, B, C, D = HOSTS
VM: dict[str, Any] = {"cpu": 1, "memory_mb": 256, "disk_gb": 1, "labels": {"suite": SUITE}}


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = [
        HostSpec(
            id=host_id,
            capacity=Resources(cpu=16, memory_mb=16384, disk_gb=100),
            labels={"suite": SUITE, "pod": pod},
        )
        for host_id, pod in HOSTS.items()
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running_fleet:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"] in HOSTS and h["status"] == "online") == 4,
                timeout=60,
                what="the allocator fleet online",
            )
        yield running_fleet


@pytest.fixture(scope="module")
async def api(stack: Stack, fleet: SimulatedFleet) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


async def _place(api: httpx.AsyncClient, name: str, **asked: Any) -> dict[str, Any]:
    created = await api.post("/v1/vms", json={"name": f"{SUITE}-{name}", **VM, **asked})
    assert created.status_code == 202, created.text
    found = await eventually(
        lambda: api.get(f"/v1/vms/{created.json()['id']}"),
        lambda r: r.json()["status"] not in ("pending", "scheduled"),
        timeout=30,
        what=f"{name} decided",
    )
    vm: dict[str, Any] = found.json()
    assert vm["status"] == "running", vm
    return vm


async def test_the_seeds_allocators_each_choose_by_their_rule(api: httpx.AsyncClient) -> None:
    # first_fit: the first host in id order, again and again while it fits.
    firsts = [await _place(api, f"first-{n}", strategy="first_fit") for n in range(3)]
    assert [vm["hypervisor_id"] for vm in firsts] == [A, A, A]
    decision = (await api.get(f"/v1/vms/{firsts[0]['id']}/placement")).json()["decision"]
    assert decision["strategy"] == "first_fit"

    # most_vms: the host running the most VMs (A, 3); fewest_vms: one running none, lowest id first.
    assert (await _place(api, "most", strategy="most_vms"))["hypervisor_id"] == A
    spread = [(await _place(api, f"few-{n}", strategy="fewest_vms"))["hypervisor_id"] for n in range(3)]
    assert spread == [B, C, D]


async def test_user_concentrated_prefers_the_pod_where_the_project_runs_most(api: httpx.AsyncClient) -> None:
    # The project (the test token's) now runs 5 VMs in pod 1 (A: 4, B: 1) and 2 in pod 2 (C, D): it
    # goes to pod 1's first host. Five more pinned to pod 2 make pod 2 the project's (7 against 6).
    assert (await _place(api, "conc-1", strategy="user_concentrated"))["hypervisor_id"] == A
    pod_2 = [{"key": "pod", "operator": "In", "values": [POD_2]}]
    for n in range(5):
        await _place(api, f"pin-{n}", strategy="first_fit", host_selector=pod_2)
    # A batch: each VM counted in its pod as the round places it, all go to pod 2's first host.
    batch = await api.post(
        "/v1/vms/batch",
        json={"vms": [{"name": f"{SUITE}-conc-b{n}", **VM, "strategy": "user_concentrated"} for n in range(3)]},
    )
    assert batch.status_code == 202, batch.text
    placed = [
        (
            await eventually(
                lambda vm_id=item["id"]: api.get(f"/v1/vms/{vm_id}"),  # type: ignore[misc]
                lambda r: r.json()["status"] == "running",
                timeout=30,
                what="a batch VM running",
            )
        ).json()
        for item in batch.json()["items"]
    ]
    assert {vm["hypervisor_id"] for vm in placed} == {C}, placed

    # The what-if asks the same question of the same counts.
    simulated = await api.post(
        "/v1/placement/simulate", json={"vms": [{"name": f"{SUITE}-sim", **VM, "strategy": "user_concentrated"}]}
    )
    assert simulated.status_code == 200, simulated.text
    assert simulated.json()["placements"][0]["host"] == C

    # A replay rebuilds the decision's inputs, the project's pods included, and decides the same.
    replay = await api.get(f"/v1/vms/{placed[-1]['id']}/placement/replay")
    assert replay.status_code == 200, replay.text
    assert (replay.json()["same"], replay.json()["host"]) == (True, C)
    other = await api.get(f"/v1/vms/{placed[-1]['id']}/placement/replay", params={"strategy": "most_vms"})
    assert other.json()["strategy"] == "most_vms"


async def test_a_seed_allocator_may_be_the_runtime_default(api: httpx.AsyncClient) -> None:
    assert (await api.put("/v1/settings/scheduler", json={"default_strategy": "fewest_vms"})).status_code == 200
    try:
        assert (await api.get("/v1/settings/scheduler")).json()["default_strategy"] == "fewest_vms"
        probes: list[str] = []

        async def probe() -> str:
            vm = await _place(api, f"default-{len(probes)}")
            probes.append(vm["id"])
            decision = (await api.get(f"/v1/vms/{vm['id']}/placement")).json()["decision"]
            return str(decision["strategy"])

        # Schedulers re-read the default every 2 seconds.
        await eventually(probe, lambda strategy: strategy == "fewest_vms", timeout=30, what="fewest_vms as default")
    finally:
        await api.put("/v1/settings/scheduler", json={"default_strategy": "least_loaded"})
