"""Dedicated hosts end to end on the real servers: an operator gives a host to a project (PATCH
dedicated_to, scope hosts:admin); it then takes that project's VMs only, whatever another VM
tolerates; a VM asking ``dedicated`` goes only to its project's dedicated hosts; preemption leaves
another project's dedicated host alone; ending the dedication opens the host again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from devtools.stack import Stack, api_client
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources
from vmsched_redis.snapshot import Snapshot

SUITE = f"ded-{uuid.uuid4().hex[:6]}"
MINE, SHARED = f"{SUITE}-a", f"{SUITE}-b"  # the dedicated host has the lower id: first_fit tries it first
VM: dict[str, Any] = {"cpu": 1, "memory_mb": 256, "disk_gb": 1, "labels": {"suite": SUITE}, "strategy": "first_fit"}
ANY_TAINT = [{"operator": "Exists"}]


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = [
        HostSpec(id=host_id, capacity=Resources(cpu=2, memory_mb=4096, disk_gb=100), labels={"suite": SUITE})
        for host_id in (MINE, SHARED)
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running_fleet:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"] in (MINE, SHARED) and h["status"] == "online") == 2,
                timeout=60,
                what="the dedicated fleet online",
            )
        yield running_fleet


async def _decided(api: httpx.AsyncClient, name: str, **asked: Any) -> dict[str, Any]:
    created = await api.post("/v1/vms", json={"name": f"{SUITE}-{name}", **VM, **asked})
    assert created.status_code == 202, created.text
    found = await eventually(
        lambda: api.get(f"/v1/vms/{created.json()['id']}"),
        lambda r: r.json()["status"] not in ("pending", "scheduled"),
        timeout=30,
        what=f"{name} decided",
    )
    vm: dict[str, Any] = found.json()
    return vm


async def _gone(api: httpx.AsyncClient, vm: dict[str, Any]) -> None:
    assert (await api.delete(f"/v1/vms/{vm['id']}")).status_code == 202
    await eventually(
        lambda: api.get(f"/v1/vms/{vm['id']}"),
        lambda r: r.json()["status"] == "deleted",
        timeout=30,
        what=f"{vm['name']} deleted",
    )


async def test_a_dedicated_host_takes_only_its_projects_vms(
    stack: Stack, servers: Servers, fleet: SimulatedFleet
) -> None:
    async with stack.async_client(timeout=30) as admin:
        project = f"{SUITE}-p"
        assert (await admin.post("/v1/projects", json={"name": project, "quota": {}})).status_code == 201
        token = await admin.post(
            "/v1/tokens",
            json={"name": f"{SUITE}-t", "project": project, "scopes": ["vms:read", "vms:write", "hosts:read"]},
        )
        assert token.status_code == 201, token.text
        async with api_client(stack.api_url, token.json()["token"], timeout=30) as theirs:
            # Only hosts:admin may dedicate a host; a bad project name is a 422 naming the field.
            refused = await theirs.patch(f"/v1/hosts/{MINE}", json={"dedicated_to": project})
            assert refused.status_code == 403
            bad = await admin.patch(f"/v1/hosts/{MINE}", json={"dedicated_to": "Not A Project"})
            assert bad.status_code == 422
            assert bad.json()["detail"][0]["loc"] == ["body", "dedicated_to"]
            dedicated = await admin.patch(f"/v1/hosts/{MINE}", json={"dedicated_to": project})
            assert dedicated.status_code == 200, dedicated.text
            assert dedicated.json()["dedicated_to"] == project
            assert (await admin.get(f"/v1/hosts/{SHARED}")).json()["dedicated_to"] is None
            info = await admin.get(f"/v1/hosts/{MINE}/scheduling-info")
            assert f"Dedicated to: {project}" in info.text.splitlines()
            redis = Redis.from_url(servers.redis_url, decode_responses=True)
            try:
                read = await Snapshot(redis, servers.redis_key_prefix).read_hosts([MINE])
            finally:
                await redis.aclose()
            host = read[MINE]
            assert host is not None
            assert host.dedicated_to == project

            # Another project's VM never lands there, whatever it tolerates.
            other = await _decided(admin, "other", tolerations=ANY_TAINT, priority=1000)
            assert other["hypervisor_id"] == SHARED, other
            decision = (await admin.get(f"/v1/vms/{other['id']}/placement")).json()["decision"]
            assert decision["rejections"]["dedicated"] >= 1
            nowhere = await _decided(admin, "other-dedicated", dedicated=True)
            assert nowhere["status"] == "unschedulable", nowhere
            assert (await admin.get(f"/v1/vms/{nowhere['id']}/placement")).json()["decision"]["reason"] == "dedicated"

            # The project's VMs: dedicated ones only there, others there first (first_fit) too.
            own = await _decided(theirs, "own-dedicated", dedicated=True, priority=0)
            assert (own["hypervisor_id"], own["dedicated"]) == (MINE, True), own
            plain = await _decided(theirs, "own-plain")
            assert plain["hypervisor_id"] == MINE, plain

            # The shared host is full (2 cpu: "other" and one more, both of priority 1000); a VM of
            # the default project of priority 900 may not preempt the project's VMs (0) on its host.
            blocker = await _decided(admin, "blocker", priority=1000)
            assert blocker["hypervisor_id"] == SHARED, blocker
            preemptor = await _decided(admin, "preemptor", priority=900)
            assert preemptor["status"] == "unschedulable", preemptor
            for vm_id in (own["id"], plain["id"]):
                assert (await theirs.get(f"/v1/vms/{vm_id}")).json()["status"] == "running"

            # Ending the dedication opens the host to every project again.
            ended = await admin.patch(f"/v1/hosts/{MINE}", json={"dedicated_to": None})
            assert ended.json()["dedicated_to"] is None
            await _gone(theirs, plain)
            after = await eventually(
                lambda: _decided(admin, f"after-{uuid.uuid4().hex[:4]}"),
                lambda vm: vm["hypervisor_id"] == MINE,
                timeout=30,
                what="a default-project VM on the undedicated host",
            )
            for vm in (other, blocker, after):
                await _gone(admin, vm)
            await _gone(theirs, own)
