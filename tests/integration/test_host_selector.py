"""Host selectors end to end: through the API, PostgreSQL, vm.create and the scheduler to an agent,
and kept when a VM is placed again after its agent refused it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx
import pytest

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import Resources

SUITE = "selector"
SMALL = Resources(cpu=16, memory_mb=32768, disk_gb=200)
LARGE = Resources(cpu=32, memory_mb=65536, disk_gb=500)


def spec(host_id: str, capacity: Resources, **labels: str) -> HostSpec:
    return HostSpec(id=host_id, capacity=capacity, labels={"suite": SUITE, **labels})


# A small z1 host whose agent refuses every create; best_fit picks it first for a z1 VM.
REFUSING = [spec("sel-1-refuses", SMALL, zone="z1")]
WORKING = [
    spec("sel-2", LARGE, zone="z1", ssd="yes"),
    spec("sel-3", SMALL, zone="z2"),
    spec("sel-4", LARGE, zone="z3", ssd="yes"),
]


@pytest.fixture(scope="module")
async def fleets(stack: Stack, servers: Servers) -> AsyncIterator[None]:
    async with (
        await enrolled_fleet(servers, REFUSING, heartbeat_interval=1.0, fail_rate=1.0),
        await enrolled_fleet(servers, WORKING, heartbeat_interval=1.0),
        stack.async_client() as api,
    ):
        await eventually(
            lambda: api.get("/v1/hosts"),
            lambda r: sum(1 for h in r.json() if h["id"].startswith("sel-") and h["status"] == "online") == 4,
            timeout=60,
            what="4 hosts online",
        )
        yield


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


def body(name: str, *terms: Mapping[str, object], strategy: str = "least_loaded") -> dict[str, object]:
    return {
        "name": name,
        "cpu": 1,
        "memory_mb": 1024,
        "disk_gb": 10,
        "labels": {"suite": SUITE},
        "host_selector": [dict(term) for term in terms],
        "strategy": strategy,
    }


async def settled(api: httpx.AsyncClient, vm_id: str) -> dict[str, object]:
    response = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] in ("running", "unschedulable", "failed"),
        timeout=60,
        what=f"VM {vm_id} to settle",
    )
    vm: dict[str, object] = response.json()
    return vm


@pytest.mark.parametrize(
    ("terms", "allowed"),
    [
        ([{"key": "zone", "operator": "In", "values": ["z2", "z3"]}], {"sel-3", "sel-4"}),
        ([{"key": "zone", "operator": "NotIn", "values": ["z1", "z3"]}], {"sel-3"}),
        ([{"key": "ssd", "operator": "Exists"}, {"key": "zone", "operator": "NotIn", "values": ["z1"]}], {"sel-4"}),
        ([{"key": "ssd", "operator": "DoesNotExist"}, {"key": "zone", "operator": "In", "values": ["z2"]}], {"sel-3"}),
    ],
)
async def test_a_vm_with_a_selector_lands_only_on_a_matching_host(
    api: httpx.AsyncClient, fleets: None, terms: list[dict[str, object]], allowed: set[str]
) -> None:
    placed = []
    for index in range(3):
        created = await api.post("/v1/vms", json=body(f"sel-vm-{index}", *terms))
        assert created.status_code == 202, created.text
        placed.append(await settled(api, created.json()["id"]))
    assert {vm["status"] for vm in placed} == {"running"}
    assert {vm["hypervisor_id"] for vm in placed} <= allowed
    assert all(vm["host_selector"] == [{"values": [], **term} for term in terms] for vm in placed)


async def test_a_vm_whose_selector_no_host_satisfies_is_unschedulable_for_host_selector(
    api: httpx.AsyncClient, fleets: None
) -> None:
    term = {"key": "zone", "operator": "In", "values": ["z9"]}
    vm_id = (await api.post("/v1/vms", json=body("sel-nowhere", term))).json()["id"]
    vm = await settled(api, vm_id)
    assert vm["status"] == "unschedulable"
    assert str(vm["status_reason"]).startswith("host_selector: none of ")
    decision = (await api.get(f"/v1/vms/{vm_id}/placement")).json()["decision"]
    assert decision["reason"] == "host_selector"
    assert decision["rejections"]["host_selector"] == 4  # the sel- hosts (the others lack the suite label)
    examples = decision["examples"]["host_selector"]
    assert examples
    assert all(example["reason"].startswith("host_selector: zone In [z9] (host has zone=z") for example in examples)


async def test_a_vm_placed_again_after_its_agent_refused_it_keeps_its_selector(
    api: httpx.AsyncClient, fleets: None
) -> None:
    # best_fit tries the small z1 host first (it refuses); without the selector the retry would go
    # to the small z2 host, with it only the large z1 host is left.
    term = {"key": "zone", "operator": "In", "values": ["z1"]}
    vm_id = (await api.post("/v1/vms", json=body("sel-retried", term, strategy="best_fit"))).json()["id"]
    vm = await settled(api, vm_id)
    assert (vm["status"], vm["hypervisor_id"], vm["attempt"]) == ("running", "sel-2", 2)
    attempts = vm["attempts"]
    assert isinstance(attempts, list)
    assert [attempt.get("host") for attempt in attempts][:1] == ["sel-1-refuses"], attempts
