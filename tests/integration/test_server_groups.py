"""Server groups through the API on the real stack: create, list, delete (409 while it has members),
bad input refused, and each policy placing VMs end to end on four simulated hosts in two zones."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

SUITE = "grp"
ZONE_OF = {"grp-0001": "z1", "grp-0002": "z2", "grp-0003": "z1", "grp-0004": "z2"}


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = generate_hosts(
        4, prefix=SUITE, capacity=Resources(cpu=64, memory_mb=65536, disk_gb=1000), labels={"suite": SUITE}, zones=2
    )
    assert {h.id: h.labels["zone"] for h in hosts} == ZONE_OF
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"].startswith(SUITE) and h["status"] == "online") == 4,
                timeout=60,
                what="4 hosts online",
            )
        yield running


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


def vm(name: str, group: str) -> dict[str, object]:
    return {"name": name, "cpu": 1, "memory_mb": 512, "disk_gb": 1, "labels": {"suite": SUITE}, "server_group": group}


async def create_group(api: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await api.post("/v1/server-groups", json={"name": f"g-{uuid.uuid4().hex[:6]}", **body})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def settled(api: httpx.AsyncClient, ids: list[str]) -> list[dict[str, Any]]:
    """The VMs once none is pending any more."""

    async def read() -> list[dict[str, Any]]:
        return [r.json() for r in await asyncio.gather(*(api.get(f"/v1/vms/{vm_id}") for vm_id in ids))]

    return await eventually(
        read, lambda vms: all(v["status"] not in ("pending",) for v in vms), timeout=30, what="the VMs decided"
    )


async def delete_all(api: httpx.AsyncClient, ids: list[str]) -> None:
    for vm_id in ids:
        assert (await api.delete(f"/v1/vms/{vm_id}")).status_code == 202
    await eventually(
        lambda: asyncio.gather(*(api.get(f"/v1/vms/{vm_id}") for vm_id in ids)),
        lambda found: all(r.json()["status"] == "deleted" for r in found),
        timeout=30,
        what="the VMs deleted",
    )


async def test_a_group_is_created_listed_shown_and_deleted(api: httpx.AsyncClient) -> None:
    created = await create_group(api, policy="spread", topology_key="zone", max_skew=2)
    assert created["members"] == []
    assert (created["policy"], created["topology_key"], created["max_per_domain"], created["max_skew"]) == (
        "spread",
        "zone",
        1,
        2,
    )
    assert (await api.get(f"/v1/server-groups/{created['id']}")).json() == created
    assert created["id"] in {g["id"] for g in (await api.get("/v1/server-groups")).json()}
    assert (await api.delete(f"/v1/server-groups/{created['id']}")).status_code == 204
    assert (await api.get(f"/v1/server-groups/{created['id']}")).status_code == 404
    assert (await api.delete(f"/v1/server-groups/{created['id']}")).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "g", "policy": "together"}, "policy"),
        ({"name": "g", "policy": "spread", "max_skew": 0}, "max_skew"),
        ({"name": "g", "policy": "anti-affinity", "max_per_domain": 0}, "max_per_domain"),
        ({"name": "g", "policy": "affinity", "topology_key": ""}, "topology_key"),
        ({"name": "has spaces", "policy": "affinity"}, "name"),
        ({"policy": "affinity"}, "name"),
    ],
)
async def test_a_bad_group_is_a_422_naming_the_field(api: httpx.AsyncClient, body: dict[str, Any], field: str) -> None:
    before = len((await api.get("/v1/server-groups")).json())
    response = await api.post("/v1/server-groups", json=body)
    assert response.status_code == 422
    assert any(error["loc"][-1] == field for error in response.json()["detail"])
    assert len((await api.get("/v1/server-groups")).json()) == before


async def test_a_vm_naming_an_unknown_group_is_a_422_and_nothing_is_created(api: httpx.AsyncClient) -> None:
    name = f"nogroup-{uuid.uuid4().hex[:6]}"
    unknown = str(uuid.uuid4())
    response = await api.post("/v1/vms", json=vm(name, unknown))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "server_group"]
    assert unknown in response.json()["detail"][0]["msg"]
    group = await create_group(api, policy="affinity")
    response = await api.post("/v1/vms/batch", json={"vms": [vm(name, group["id"]), vm(name, unknown)]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "vms", 1, "server_group"]
    listed = (await api.get("/v1/vms", params={"limit": 1000})).json()["items"]
    assert name not in {v["name"] for v in listed}
    assert (await api.get(f"/v1/server-groups/{group['id']}")).json()["members"] == []


async def test_anti_affinity_puts_each_member_on_its_own_host_and_refuses_a_fifth(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    group = await create_group(api, policy="anti-affinity")
    ids = [(await api.post("/v1/vms", json=vm(f"anti-{i}", group["id"]))).json()["id"] for i in range(4)]
    placed = await settled(api, ids)
    assert sorted(v["hypervisor_id"] for v in placed) == sorted(ZONE_OF)
    assert all(v["server_group"] == group["id"] for v in placed)
    fifth = (await api.post("/v1/vms", json=vm("anti-4", group["id"]))).json()["id"]
    (refused,) = await settled(api, [fifth])
    assert refused["status"] == "unschedulable"
    assert refused["status_reason"].startswith("server_group: ")
    record = (await api.get(f"/v1/vms/{fifth}/placement")).json()["decision"]
    assert record["rejections"]["server_group"] == 4
    assert set((await api.get(f"/v1/server-groups/{group['id']}")).json()["members"]) == {*ids, fifth}

    conflict = await api.delete(f"/v1/server-groups/{group['id']}")
    assert conflict.status_code == 409
    assert "5 members" in conflict.json()["detail"]
    await delete_all(api, [*ids, fifth])
    assert (await api.delete(f"/v1/server-groups/{group['id']}")).status_code == 204


async def test_spread_over_zones_keeps_them_within_max_skew(api: httpx.AsyncClient, fleet: SimulatedFleet) -> None:
    group = await create_group(api, policy="spread", topology_key="zone")
    response = await api.post("/v1/vms/batch", json={"vms": [vm(f"spread-{i}", group["id"]) for i in range(6)]})
    ids = [v["id"] for v in response.json()["items"]]
    placed = await settled(api, ids)
    assert Counter(ZONE_OF[v["hypervisor_id"]] for v in placed) == {"z1": 3, "z2": 3}
    await delete_all(api, ids)


async def test_affinity_keeps_every_member_in_the_first_ones_zone(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    group = await create_group(api, policy="affinity", topology_key="zone")
    first = (await api.post("/v1/vms", json=vm("aff-0", group["id"]))).json()["id"]
    (placed,) = await settled(api, [first])
    zone = ZONE_OF[placed["hypervisor_id"]]
    response = await api.post("/v1/vms/batch", json={"vms": [vm(f"aff-{i}", group["id"]) for i in range(1, 6)]})
    ids = [v["id"] for v in response.json()["items"]]
    assert {ZONE_OF[v["hypervisor_id"]] for v in await settled(api, ids)} == {zone}
    await delete_all(api, [first, *ids])


async def test_soft_anti_affinity_spreads_while_it_can_and_never_refuses(
    api: httpx.AsyncClient, fleet: SimulatedFleet
) -> None:
    group = await create_group(api, policy="soft-anti-affinity")
    response = await api.post("/v1/vms/batch", json={"vms": [vm(f"soft-{i}", group["id"]) for i in range(6)]})
    ids = [v["id"] for v in response.json()["items"]]
    placed = await settled(api, ids)
    assert all(v["status"] in ("scheduled", "running") for v in placed)
    assert sorted(Counter(v["hypervisor_id"] for v in placed).values()) == [1, 1, 2, 2]
    await delete_all(api, ids)
