"""Preemption end to end on the real servers: through the API, a scheduler, the gateway and an agent."""

from __future__ import annotations

import asyncio
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


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


@pytest.fixture
async def one_host(stack: Stack, servers: Servers, api: httpx.AsyncClient) -> AsyncIterator[tuple[str, SimulatedFleet]]:
    """One host of 8 vCPUs of this test's own; its suite label and its simulated agent."""
    suite = f"preempt-{uuid.uuid4().hex[:6]}"
    host = HostSpec(id=f"{suite}-1", capacity=Resources(cpu=8, memory_mb=65536, disk_gb=1000), labels={"suite": suite})
    async with await enrolled_fleet(servers, [host], heartbeat_interval=1.0) as fleet:
        await eventually(
            lambda: api.get(f"/v1/hosts/{host.id}"),
            lambda r: r.status_code == 200 and r.json()["status"] == "online",
            timeout=60,
            what="the host online",
        )
        yield suite, fleet


async def create(api: httpx.AsyncClient, suite: str, name: str, cpu: int, **extra: Any) -> str:
    body = {"name": name, "cpu": cpu, "memory_mb": 1024, "disk_gb": 10, "labels": {"suite": suite}, **extra}
    response = await api.post("/v1/vms", json=body)
    assert response.status_code == 202, response.text
    vm_id: str = response.json()["id"]
    return vm_id


async def status_of(api: httpx.AsyncClient, vm_id: str, *wanted: str, timeout: float = 30) -> dict[str, Any]:
    response = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] in wanted,
        timeout=timeout,
        what=f"VM {vm_id} {' or '.join(wanted)}",
    )
    vm: dict[str, Any] = response.json()
    return vm


async def test_a_vm_of_higher_priority_takes_the_room_and_the_victims_follow_their_restart_policy(
    api: httpx.AsyncClient, one_host: tuple[str, SimulatedFleet]
) -> None:
    suite, fleet = one_host
    keep = await create(api, suite, "keep", 4, priority=300)
    ends = await create(api, suite, "ends", 2, priority=10)
    comes_back = await create(api, suite, "comes-back", 2, priority=10, restart_policy="on_failure", wait_s=600)
    for vm_id in (keep, ends, comes_back):
        await status_of(api, vm_id, "running")
    urgent = await create(api, suite, "urgent", 4, priority=200)
    placed = await status_of(api, urgent, "scheduled", "running")
    assert placed["hypervisor_id"] == f"{suite}-1"
    assert (await api.get(f"/v1/vms/{keep}")).json()["status"] == "running"  # higher than the preemptor
    for victim in (ends, comes_back):
        vm = (await api.get(f"/v1/vms/{victim}")).json()
        assert vm["preempted_by"] == urgent
        assert vm["status"] in ("preempted", "failed"), vm  # failed once its agent deleted it
        assert f"preempted by VM {urgent}" in vm["status_reason"]
    # Its replay chooses the same host and the same victims, on the inputs the preemption saw.
    replayed = await api.get(f"/v1/vms/{urgent}/placement/replay")
    assert replayed.status_code == 200, replayed.text
    replay = replayed.json()
    assert replay["journal"]["kind"] == "preemption"
    assert (replay["decided_host"], replay["host"], replay["same"]) == (f"{suite}-1", f"{suite}-1", True)
    assert sorted(replay["victims"]) == sorted([ends, comes_back])
    ended = await status_of(api, ends, "failed")
    assert ended["preempted_by"] == urgent
    running = await status_of(api, urgent, "running")
    assert running["attempt"] == 1  # its create waited for the deletes: the agent never refused it
    # The agent was told to delete each victim, then to create the preemptor.
    host_id = f"{suite}-1"
    actions = [(c.action.value, str(c.vm_id)) for c in fleet.received(host_id)]
    assert actions.index(("delete", ends)) < actions.index(("create", urgent))
    assert actions.index(("delete", comes_back)) < actions.index(("create", urgent))
    # on_failure: placed again after RESTART_DELAY; no room now, so it waits.
    back = await status_of(api, comes_back, "waiting", timeout=90)
    assert back["attempt"] == 2


async def test_a_vm_of_the_same_priority_takes_nothing(
    api: httpx.AsyncClient, one_host: tuple[str, SimulatedFleet]
) -> None:
    suite, _ = one_host
    running = await asyncio.gather(*(create(api, suite, f"peer-{n}", 4, priority=100) for n in range(2)))
    for vm_id in running:
        await status_of(api, vm_id, "running")
    late = await create(api, suite, "late", 4, priority=100)
    vm = await status_of(api, late, "unschedulable")
    assert vm["status_reason"].startswith("cpu:")
    for vm_id in running:
        assert (await api.get(f"/v1/vms/{vm_id}")).json()["status"] == "running"


async def test_priority_is_validated(api: httpx.AsyncClient) -> None:
    response = await api.post("/v1/vms", json={"name": "x", "cpu": 1, "memory_mb": 1, "disk_gb": 1, "priority": 1001})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "priority"]
