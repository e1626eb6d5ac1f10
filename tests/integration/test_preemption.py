"""Preemption end to end on the real servers: through the API, a scheduler, the gateway and an agent."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.amqp_tools import Tap
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology
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
    # The replay says what became of each victim: deleted, one failed, the other waiting for room.
    fates = {fate["vm_id"]: fate for fate in (await api.get(f"/v1/vms/{urgent}/placement/replay")).json()["fates"]}
    assert {vm_id: (f["outcome"], f["from_host"], f["status"], f["host"]) for vm_id, f in fates.items()} == {
        ends: ("deleted", host_id, "failed", None),
        comes_back: ("deleted", host_id, "waiting", None),
    }


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


@pytest.fixture
async def two_hosts(
    stack: Stack, servers: Servers, api: httpx.AsyncClient
) -> AsyncIterator[tuple[str, SimulatedFleet]]:
    """Two hosts of 8 vCPUs of this test's own, whose agents can migrate."""
    suite = f"pmove-{uuid.uuid4().hex[:6]}"
    hosts = [
        HostSpec(id=f"{suite}-{n}", capacity=Resources(cpu=8, memory_mb=65536, disk_gb=1000), labels={"suite": suite})
        for n in (1, 2)
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as fleet:
        ids = {host.id for host in hosts}
        await eventually(
            lambda: api.get("/v1/hosts"),
            lambda r: sum(1 for h in r.json() if h["id"] in ids and h["status"] == "online") == len(ids),
            timeout=60,
            what=f"{sorted(ids)} online",
        )
        yield suite, fleet


async def only_on(api: httpx.AsyncClient, suite: str, host: int) -> None:
    for n in (1, 2):
        response = await api.patch(f"/v1/hosts/{suite}-{n}", json={"scheduling_paused": n != host})
        assert response.status_code == 200, response.text


async def test_a_victim_another_host_takes_is_moved_there_and_the_preemptor_takes_its_room(
    api: httpx.AsyncClient, two_hosts: tuple[str, SimulatedFleet], servers: Servers
) -> None:
    suite, _ = two_hosts
    await only_on(api, suite, 2)
    keep = await create(api, suite, "keep", 2, priority=900)  # host 2: 6 vCPUs free
    await status_of(api, keep, "running")
    await only_on(api, suite, 1)
    victim = await create(api, suite, "victim", 6, priority=10)  # host 1: 2 vCPUs free
    await status_of(api, victim, "running")
    for n in (1, 2):
        assert (await api.patch(f"/v1/hosts/{suite}-{n}", json={"scheduling_paused": False})).status_code == 200
    async with Tap(servers.amqp_url, topology.EXCHANGE.name, topology.VM_PREEMPTED) as preempted:
        urgent = await create(api, suite, "urgent", 8, priority=500)  # fits nowhere: host 1 once the victim is gone
        placed = await status_of(api, urgent, "running", timeout=60)
        assert placed["hypervisor_id"] == f"{suite}-1"
        moved = await status_of(api, victim, "running")
        assert (moved["hypervisor_id"], moved["migrations"], moved["preempted_by"]) == (f"{suite}-2", 1, urgent)
        event = json.loads((await preempted.wait(lambda m: json.loads(m.body)["vm_id"] == victim)).body)
        assert (event["outcome"], event["preempted_by"], event["hypervisor_id"]) == ("moved", urgent, f"{suite}-1")
    assert (await api.get(f"/v1/vms/{keep}")).json()["hypervisor_id"] == f"{suite}-2"
    # The replay names the victim and where it went, though the VM was placed by a later decision.
    kept = (await api.get(f"/v1/vms/{urgent}/placement")).json()["preemption"]
    assert (kept["host"], kept["victims"], kept["journal"]["kind"]) == (f"{suite}-1", [victim], "preemption")
    replay = await api.get(f"/v1/vms/{urgent}/placement/replay")
    assert replay.status_code == 200, replay.text
    moved = replay.json()["preemption"]
    assert (moved["decided_host"], moved["host"], moved["same"]) == (f"{suite}-1", f"{suite}-1", True)
    assert moved["victims"] == [
        {"vm_id": victim, "outcome": "moved", "from_host": f"{suite}-1", "status": "running", "host": f"{suite}-2"}
    ]
