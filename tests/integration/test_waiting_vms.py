"""Waiting instead of failing, on the real servers: a VM that fits nowhere waits (``wait_s``) and is
placed, oldest first, when room appears; past its wait it ends unschedulable; deleted while waiting,
it is never placed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from devtools.stack import Stack
from tests.faults.events import EventCounter
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_amqp import topology
from vmsched_contract.messages import Resources

HOST_CPU = 8


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


@pytest.fixture
async def one_host(stack: Stack, servers: Servers, api: httpx.AsyncClient) -> AsyncIterator[str]:
    """One host of 8 vCPUs of this test's own (its VMs ask for its label); the suite label."""
    suite = f"wait-{uuid.uuid4().hex[:6]}"
    host = HostSpec(id=suite, capacity=Resources(cpu=HOST_CPU, memory_mb=65536, disk_gb=1000), labels={"suite": suite})
    async with await enrolled_fleet(servers, [host], heartbeat_interval=1.0):
        await eventually(
            lambda: api.get(f"/v1/hosts/{suite}"),
            lambda r: r.status_code == 200 and r.json()["status"] == "online",
            timeout=60,
            what="the host online",
        )
        yield suite


async def create(api: httpx.AsyncClient, suite: str, name: str, cpu: int, **extra: Any) -> str:
    body = {"name": name, "cpu": cpu, "memory_mb": 1024, "disk_gb": 10, "labels": {"suite": suite}, **extra}
    response = await api.post("/v1/vms", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def reaches(api: httpx.AsyncClient, vm_id: str, *statuses: str, timeout: float = 30) -> dict[str, Any]:
    response = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] in statuses,
        timeout=timeout,
        what=f"VM {vm_id} {' or '.join(statuses)}",
    )
    found: dict[str, Any] = response.json()
    return found


async def test_a_waiting_vm_is_placed_when_a_vm_is_deleted(
    api: httpx.AsyncClient, one_host: str, servers: Servers
) -> None:
    async with EventCounter(servers.amqp_url, topology.VM_WAITING) as waiting_events:
        holder = await create(api, one_host, "holder", HOST_CPU)
        await reaches(api, holder, "running")
        waiter = await create(api, one_host, "waiter", HOST_CPU, wait_s=120)
        waiting = await reaches(api, waiter, "waiting")
        assert waiting["status_reason"].startswith("cpu: none of"), waiting["status_reason"]
        assert waiting["wait_s"] == 120
        assert waiting["wait_until"] is not None
        await eventually(
            _count(waiting_events, waiter), lambda n: n >= 1, timeout=10, what="vm.waiting for the waiting VM"
        )
        assert (await api.delete(f"/v1/vms/{holder}")).status_code == 202
        placed = await reaches(api, waiter, "scheduled", "running")
    assert placed["hypervisor_id"] == one_host
    assert placed["attempt"] == 2  # a wake is a new placement attempt


async def test_a_waiting_vm_ends_unschedulable_with_the_last_reason_once_its_wait_passes(
    api: httpx.AsyncClient, one_host: str
) -> None:
    holder = await create(api, one_host, "holder", HOST_CPU)
    await reaches(api, holder, "running")
    waiter = await create(api, one_host, "impatient", HOST_CPU, wait_s=2)
    await reaches(api, waiter, "waiting")
    ended = await reaches(api, waiter, "unschedulable", timeout=20)
    assert ended["status_reason"].startswith("cpu: none of"), ended["status_reason"]
    assert "waited 2s" in ended["status_reason"]
    assert ended["hypervisor_id"] is None


async def test_room_goes_to_the_oldest_waiting_vm_first(api: httpx.AsyncClient, one_host: str) -> None:
    holder = await create(api, one_host, "holder", HOST_CPU)
    await reaches(api, holder, "running")
    oldest = await create(api, one_host, "oldest", HOST_CPU, wait_s=120)
    await reaches(api, oldest, "waiting")
    younger = await create(api, one_host, "younger", HOST_CPU, wait_s=120)
    await reaches(api, younger, "waiting")
    assert (await api.delete(f"/v1/vms/{holder}")).status_code == 202
    await reaches(api, oldest, "running")
    assert (await api.get(f"/v1/vms/{younger}")).json()["status"] == "waiting"
    # and the next room goes to the younger one
    assert (await api.delete(f"/v1/vms/{oldest}")).status_code == 202
    await reaches(api, younger, "running")


async def test_a_waiting_vm_deleted_by_its_user_is_never_placed(api: httpx.AsyncClient, one_host: str) -> None:
    holder = await create(api, one_host, "holder", HOST_CPU)
    await reaches(api, holder, "running")
    withdrawn = await create(api, one_host, "withdrawn", HOST_CPU, wait_s=120)
    await reaches(api, withdrawn, "waiting")
    patient = await create(api, one_host, "patient", HOST_CPU, wait_s=120)
    await reaches(api, patient, "waiting")
    deleted = await api.delete(f"/v1/vms/{withdrawn}")
    assert deleted.status_code == 202
    assert deleted.json()["status"] == "deleted"
    assert (await api.delete(f"/v1/vms/{holder}")).status_code == 202
    # The room goes to the next waiting VM (the waker acted), and the withdrawn one stays deleted.
    await reaches(api, patient, "running")
    gone = (await api.get(f"/v1/vms/{withdrawn}")).json()
    assert (gone["status"], gone["hypervisor_id"], gone["attempt"]) == ("deleted", None, 1)


async def test_a_vm_that_may_not_wait_still_fails_at_once(api: httpx.AsyncClient, one_host: str) -> None:
    vm = await create(api, one_host, "too-big", HOST_CPU * 2)
    ended = await reaches(api, vm, "unschedulable")
    assert ended["wait_until"] is None


@pytest.fixture
async def two_zones(stack: Stack, servers: Servers, api: httpx.AsyncClient) -> AsyncIterator[tuple[str, str, str]]:
    """Two hosts of 8 vCPUs of this test's own, one in zone z1, one in z2: the suite label and the
    two host ids."""
    suite = f"wait2-{uuid.uuid4().hex[:6]}"
    hosts = [
        HostSpec(
            id=f"{suite}-{zone}",
            capacity=Resources(cpu=HOST_CPU, memory_mb=65536, disk_gb=1000),
            labels={"suite": suite, "zone": zone},
        )
        for zone in ("z1", "z2")
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0):
        for host in hosts:
            await eventually(
                lambda host=host: api.get(f"/v1/hosts/{host.id}"),  # type: ignore[misc]
                lambda r: r.status_code == 200 and r.json()["status"] == "online",
                timeout=60,
                what="the hosts online",
            )
        yield suite, hosts[0].id, hosts[1].id


def in_zone(zone: str) -> dict[str, Any]:
    return {"host_selector": [{"key": "zone", "operator": "In", "values": [zone]}]}


async def test_a_waiting_vm_with_a_host_selector_is_woken_only_by_room_on_a_host_it_selects(
    api: httpx.AsyncClient, two_zones: tuple[str, str, str]
) -> None:
    suite, z1, z2 = two_zones
    holders = [await create(api, suite, f"holder-{zone}", HOST_CPU, **in_zone(zone)) for zone in ("z1", "z2")]
    for holder in holders:
        await reaches(api, holder, "running")
    selective = await create(api, suite, "selective", HOST_CPU, wait_s=120, **in_zone("z2"))
    await reaches(api, selective, "waiting")
    # A younger VM that takes any host: placed when z1 frees, which shows the waker saw that room.
    anywhere = await create(api, suite, "anywhere", HOST_CPU, wait_s=120)
    await reaches(api, anywhere, "waiting")
    assert (await api.delete(f"/v1/vms/{holders[0]}")).status_code == 202
    assert (await reaches(api, anywhere, "scheduled", "running"))["hypervisor_id"] == z1
    still = (await api.get(f"/v1/vms/{selective}")).json()
    assert (still["status"], still["attempt"]) == ("waiting", 1)  # never woken for z1's room
    assert (await api.delete(f"/v1/vms/{holders[1]}")).status_code == 202
    placed = await reaches(api, selective, "scheduled", "running")
    assert (placed["hypervisor_id"], placed["attempt"]) == (z2, 2)


async def test_a_waiting_member_of_an_anti_affinity_group_is_not_woken_by_room_beside_a_member(
    api: httpx.AsyncClient, two_zones: tuple[str, str, str]
) -> None:
    suite, z1, z2 = two_zones
    created = await api.post("/v1/server-groups", json={"name": f"g-{uuid.uuid4().hex[:6]}", "policy": "anti-affinity"})
    assert created.status_code == 201, created.text
    group = created.json()["id"]
    half, quarter = HOST_CPU // 2, HOST_CPU // 4
    member = await create(api, suite, "member-1", half, server_group=group, **in_zone("z1"))
    holder_z1 = await create(api, suite, "holder-z1", half, **in_zone("z1"))
    holder_z2 = await create(api, suite, "holder-z2", HOST_CPU, **in_zone("z2"))
    for vm in (member, holder_z1, holder_z2):
        await reaches(api, vm, "running")
    second = await create(api, suite, "member-2", quarter, server_group=group, wait_s=120)
    waiting = await reaches(api, second, "waiting")
    assert waiting["status_reason"].split(":")[0] in ("cpu", "server_group"), waiting["status_reason"]
    anywhere = await create(api, suite, "anywhere", quarter, wait_s=120)
    await reaches(api, anywhere, "waiting")
    # Room on z1 for both, where a member runs: the group forbids it to the second member, not to the
    # other VM.
    assert (await api.delete(f"/v1/vms/{holder_z1}")).status_code == 202
    assert (await reaches(api, anywhere, "scheduled", "running"))["hypervisor_id"] == z1
    still = (await api.get(f"/v1/vms/{second}")).json()
    assert (still["status"], still["attempt"]) == ("waiting", 1)
    assert (await api.delete(f"/v1/vms/{holder_z2}")).status_code == 202
    placed = await reaches(api, second, "scheduled", "running")
    assert (placed["hypervisor_id"], placed["attempt"]) == (z2, 2)


def _count(counter: EventCounter, vm_id: str) -> Any:
    async def probe() -> int:
        return len(counter.by_vm.get(vm_id, []))

    return probe
