"""Rebalancing plans on the real servers: a skewed fleet's plan moves VMs off the crowded host, only
to hosts that can migrate and take them, within the hosts selected; the plan is stored and read back."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.moving import running, settled
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import Profile, generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_common.messages import Capability, Resources

pytestmark = pytest.mark.integration

SUITE = "rbl"
HOSTS = [f"{SUITE}-000{n}" for n in range(1, 4)]
CROWDED, SPARE, CANNOT_MIGRATE = HOSTS  # the last one's agent declares power, not migrate
VM = {"cpu": 2, "memory_mb": 2048, "disk_gb": 20, "labels": {"suite": SUITE}}
ONLY_OURS = [{"key": "suite", "operator": "In", "values": [SUITE]}]


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = generate_hosts(
        3,
        prefix=SUITE,
        capacity=Resources(cpu=8, memory_mb=16384, disk_gb=200),
        profile=Profile.UNIFORM,
        labels={"suite": SUITE},
        zones=3,
    )
    hosts[2] = hosts[2].model_copy(update={"capabilities": [Capability.POWER.value]})
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running_fleet:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"] in HOSTS and h["status"] == "online") == 3,
                timeout=60,
                what="the rebalance fleet online",
            )
        yield running_fleet


@pytest.fixture
async def api(stack: Stack, fleet: SimulatedFleet, servers: Servers) -> AsyncIterator[httpx.AsyncClient]:
    """A client; afterwards the hosts unpaused and this test's VMs deleted."""
    async with stack.async_client(timeout=30) as client:
        yield client
        for host_id in HOSTS:
            await client.patch(f"/v1/hosts/{host_id}", json={"scheduling_paused": False})
        for vm_id in await _this_suites_vms(servers):
            await settled(client, vm_id)
            await client.delete(f"/v1/vms/{vm_id}")
        await eventually(
            lambda: _this_suites_vms(servers), lambda left: not left, timeout=30, what="this test's VMs deleted"
        )


async def _this_suites_vms(servers: Servers) -> list[str]:
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        rows = await conn.fetch("SELECT id FROM vms WHERE name LIKE $1 AND status <> 'deleted'", f"{SUITE}-%")
    finally:
        await conn.close()
    return [str(row["id"]) for row in rows]


async def _vms_on(api: httpx.AsyncClient, host_id: str, count: int) -> list[dict[str, Any]]:
    """``count`` running VMs on ``host_id`` (the other hosts paused meanwhile, then unpaused)."""
    for other in HOSTS:
        response = await api.patch(f"/v1/hosts/{other}", json={"scheduling_paused": other != host_id})
        assert response.status_code == 200, response.text
    vms = [await running(api, {"name": f"{SUITE}-{n}", **VM}) for n in range(count)]
    assert {vm["hypervisor_id"] for vm in vms} == {host_id}
    for other in HOSTS:
        response = await api.patch(f"/v1/hosts/{other}", json={"scheduling_paused": False})
        assert response.status_code == 200, response.text
    return vms


async def test_a_spread_plan_moves_vms_off_the_crowded_host_to_a_host_that_can_take_them(
    api: httpx.AsyncClient,
) -> None:
    vms = await _vms_on(api, CROWDED, 4)
    ours = {vm["id"] for vm in vms}
    response = await api.post("/v1/rebalance/plans", json={"goal": "spread", "host_selector": ONLY_OURS})
    assert response.status_code == 201, response.text
    plan = response.json()
    assert (plan["goal"], plan["state"], plan["max_moves"], plan["score"]) == (
        "spread",
        "planned",
        50,
        "stddev_weighted_utilisation",
    )
    assert plan["moves"], plan
    assert plan["score_after"] < plan["score_before"]
    for move in plan["moves"]:
        assert move["vm_id"] in ours
        assert (move["from"], move["to"]) == (CROWDED, SPARE)  # the other cannot migrate
        assert move["gain"] > 0
    # Spare takes 4 VMs of 2 CPUs at most: the plan never fills it beyond its capacity.
    assert len(plan["moves"]) <= 4
    read = await api.get(f"/v1/rebalance/plans/{plan['id']}")
    assert read.status_code == 200, read.text
    assert read.json() == plan
    # Nothing moved: a plan is only a plan until it is applied.
    for vm in vms:
        assert (await api.get(f"/v1/vms/{vm['id']}")).json()["hypervisor_id"] == CROWDED


async def test_a_pack_plan_empties_the_host_with_fewest_vms(api: httpx.AsyncClient) -> None:
    await _vms_on(api, CROWDED, 2)
    lone = (await _vms_on(api, SPARE, 1))[0]
    response = await api.post("/v1/rebalance/plans", json={"goal": "pack", "max_moves": 5, "host_selector": ONLY_OURS})
    assert response.status_code == 201, response.text
    plan = response.json()
    assert [(m["vm_id"], m["from"], m["to"]) for m in plan["moves"]] == [(lone["id"], SPARE, CROWDED)]
    assert plan["score_after"] == plan["score_before"] + 1


async def test_an_unknown_plan_is_404_and_a_bad_goal_422(api: httpx.AsyncClient) -> None:
    assert (await api.get(f"/v1/rebalance/plans/{uuid.uuid4()}")).status_code == 404
    assert (await api.post("/v1/rebalance/plans", json={"goal": "shuffle"})).status_code == 422
    assert (await api.post("/v1/rebalance/plans", json={"goal": "pack", "max_moves": 0})).status_code == 422
