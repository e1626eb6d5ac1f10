"""Reservations end to end on the real servers (API, a scheduler, the gateway, an agent): room held
for one project keeps another project's VMs off it, even one of higher priority, is taken by the
project's VM naming it, counts against the project's quota once, and goes back to the host at
``ends_at`` or on DELETE."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from devtools.stack import Stack, api_client
from tests.fleets import enrolled_fleet
from tests.integration.moving import disagreements, host_shares
from tests.integration.test_identity import new_project, new_token
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import Resources


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


@pytest.fixture
async def host(stack: Stack, servers: Servers, admin: httpx.AsyncClient) -> AsyncIterator[str]:
    """One host of 8 vCPUs of this test's own, online; its suite label is its id."""
    suite = f"reserve-{uuid.uuid4().hex[:6]}"
    spec = HostSpec(id=suite, capacity=Resources(cpu=8, memory_mb=65536, disk_gb=1000), labels={"suite": suite})
    async with await enrolled_fleet(servers, [spec], heartbeat_interval=1.0):
        await eventually(
            lambda: admin.get(f"/v1/hosts/{spec.id}"),
            lambda r: r.status_code == 200 and r.json()["status"] == "online",
            timeout=60,
            what="the host online",
        )
        yield suite


def on(host: str) -> list[dict[str, Any]]:
    return [{"key": "suite", "operator": "In", "values": [host]}]


def vm_body(host: str, name: str, cpu: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cpu": cpu, "memory_mb": 1024, "disk_gb": 10, "labels": {"suite": host}, **extra}


async def reserve(admin: httpx.AsyncClient, project: str, host: str, **extra: Any) -> dict[str, Any]:
    body = {"project": project, "cpu": 3, "memory_mb": 1024, "disk_gb": 10, "count": 2, "host_selector": on(host)}
    created = await admin.post("/v1/reservations", json={**body, **extra})
    assert created.status_code == 201, created.text
    assert created.json()["status"] == "pending"
    held: dict[str, Any] = (
        await eventually(
            lambda: admin.get(f"/v1/reservations/{created.json()['id']}"),
            lambda r: r.json()["status"] != "pending",
            timeout=30,
            what="the reservation placed",
        )
    ).json()
    return held


async def vm_status(api: httpx.AsyncClient, vm_id: str, *wanted: str) -> dict[str, Any]:
    found: dict[str, Any] = (
        await eventually(
            lambda: api.get(f"/v1/vms/{vm_id}"),
            lambda r: r.json()["status"] in wanted,
            timeout=30,
            what=f"VM {vm_id} {' or '.join(wanted)}",
        )
    ).json()
    return found


async def bring_end_forward(servers: Servers, reservation_id: str) -> None:
    """Move a held reservation's ``ends_at`` to now: the sweep ends it on the row's ``ends_at`` alone,
    and waiting out an ``ends_at`` far enough ahead for the steps before it would only be idle time."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        moved = await conn.execute("UPDATE reservations SET ends_at = now() WHERE id = $1::uuid", reservation_id)
    finally:
        await conn.close()
    assert moved == "UPDATE 1", moved


async def allocated_cpu(admin: httpx.AsyncClient, host: str) -> int:
    cpu: int = (await admin.get(f"/v1/hosts/{host}")).json()["allocated"]["cpu"]
    return cpu


async def test_a_reservation_keeps_another_projects_vm_off_the_held_room_and_expires(
    stack: Stack, servers: Servers, admin: httpx.AsyncClient, host: str
) -> None:
    mine, theirs = await new_project(admin), await new_project(admin)
    ends_at = datetime.now(UTC) + timedelta(minutes=10)
    reservation = await reserve(admin, mine, host, ends_at=ends_at.isoformat())
    assert (reservation["status"], reservation["hosts"], reservation["held"], reservation["used"]) == (
        "held",
        [host],
        2,
        0,
    )
    assert datetime.fromisoformat(reservation["ends_at"]) == ends_at  # the end the sweep reads below
    assert await allocated_cpu(admin, host) == 6  # two slots of 3 of the host's 8
    async with (
        api_client(stack.api_url, (await new_token(admin, mine, "vms:write"))["token"], timeout=30) as me,
        api_client(stack.api_url, (await new_token(admin, theirs, "vms:write"))["token"], timeout=30) as them,
    ):
        # Another project fills the 2 vCPUs left with a VM of priority 0; its VM of 4 vCPUs and priority
        # 1000 would fit if preemption could take held room (the low VM's 2 and a slot's 3), but it takes
        # VMs only: removing the low VM frees 2, too few. It ends unschedulable, preempting nothing.
        low = (await them.post("/v1/vms", json=vm_body(host, "low", 2))).json()
        await vm_status(them, low["id"], "running")
        kept_off = (await them.post("/v1/vms", json=vm_body(host, "kept-off", 4, priority=1000))).json()
        refused = await vm_status(them, kept_off["id"], "unschedulable")
        assert "cpu" in refused["status_reason"], refused
        low_after = (await them.get(f"/v1/vms/{low['id']}")).json()
        assert (low_after["status"], low_after["preempted_by"]) == ("running", None)
        # Nor may it name the reservation: not its project's.
        named = await them.post("/v1/vms", json=vm_body(host, "sneaky", 3, reservation=reservation["id"]))
        assert (named.status_code, named.json()["detail"][0]["type"]) == (422, "unknown_reservation")

        # The project's VM naming it takes a slot's room on the reserved host.
        taking = (await me.post("/v1/vms", json=vm_body(host, "taking", 3, reservation=reservation["id"]))).json()
        assert taking["reservation"] == reservation["id"]
        placed = await vm_status(me, taking["id"], "scheduled", "running")
        assert placed["hypervisor_id"] == host
        assert await allocated_cpu(admin, host) == 8  # the VM is where a slot was
        # Its replay makes again the decision that placed its slot, on the inputs that decision saw.
        replayed = await admin.get(f"/v1/vms/{taking['id']}/placement/replay")
        assert replayed.status_code == 200, replayed.text
        assert replayed.json()["journal"]["kind"] == "reservation_slot"
        assert (replayed.json()["decided_host"], replayed.json()["host"], replayed.json()["same"]) == (host, host, True)
        seen = (await me.get(f"/v1/reservations/{reservation['id']}")).json()
        assert (seen["held"], seen["used"]) == (1, 1)
        too_big = await me.post("/v1/vms", json=vm_body(host, "too-big", 4, reservation=reservation["id"]))
        assert (too_big.status_code, too_big.json()["detail"][0]["type"]) == (422, "reservation_unusable")

        # At ends_at the slot still held goes back to the host; the VM keeps the room it took.
        await bring_end_forward(servers, reservation["id"])
        expired = (
            await eventually(
                lambda: admin.get(f"/v1/reservations/{reservation['id']}"),
                lambda r: r.json()["status"] == "expired",
                timeout=60,
                what="the reservation expired",
            )
        ).json()
        assert (expired["held"], expired["used"]) == (0, 1)
        assert await allocated_cpu(admin, host) == 5  # the VM on the used slot (3) and the low one (2)
        assert (await me.get(f"/v1/vms/{taking['id']}")).json()["status"] in ("scheduled", "running")
        # The other project's VM now fits in what was held, once the snapshot has let it go too
        # (PostgreSQL ends the reservation first, then Redis releases its slot).
        await eventually(
            lambda: host_shares(servers, [host]),
            lambda shares: not disagreements(shares),
            timeout=30,
            what="the snapshot agreeing with PostgreSQL",
        )
        fits = (await them.post("/v1/vms", json=vm_body(host, "fits-now", 3))).json()
        assert (await vm_status(them, fits["id"], "scheduled", "running"))["hypervisor_id"] == host
        # An ended reservation takes no more VMs.
        late = await me.post("/v1/vms", json=vm_body(host, "late", 3, reservation=reservation["id"]))
        assert (late.status_code, late.json()["detail"][0]["type"]) == (422, "reservation_unusable")
        for api, vm_id in ((me, taking["id"]), (them, fits["id"]), (them, kept_off["id"]), (them, low["id"])):
            await api.delete(f"/v1/vms/{vm_id}")


async def test_a_reservation_counts_against_its_projects_quota_once(
    admin: httpx.AsyncClient, host: str, stack: Stack
) -> None:
    project = await new_project(admin, cpu=8, instances=3)
    over = await admin.post(
        "/v1/reservations",
        json={"project": project, "cpu": 3, "memory_mb": 1024, "disk_gb": 10, "count": 3, "host_selector": on(host)},
    )
    assert over.status_code == 403
    assert over.json() == {"reason": "quota_exceeded", "resource": "cpu", "limit": 8, "used": 0, "requested": 9}
    reservation = await reserve(admin, project, host)
    usage = (await admin.get(f"/v1/projects/{project}")).json()["usage"]
    assert (usage["instances"], usage["cpu"]) == (2, 6)
    # Held slots occupy their host as VMs do: it cannot be deleted from under them.
    occupied = await admin.delete(f"/v1/hosts/{host}")
    assert occupied.status_code == 409
    assert "reservation slots" in occupied.json()["detail"]
    async with api_client(stack.api_url, (await new_token(admin, project, "vms:write"))["token"], timeout=30) as me:
        # 6 of 8 used by the held slots: a VM of 3 more is past the quota, one on a slot is not.
        beyond = await me.post("/v1/vms", json=vm_body(host, "beyond", 3))
        assert (beyond.status_code, beyond.json()["resource"]) == (403, "cpu")
        taking = (await me.post("/v1/vms", json=vm_body(host, "taking", 2, reservation=reservation["id"]))).json()
        await vm_status(me, taking["id"], "scheduled", "running")
        usage = (await admin.get(f"/v1/projects/{project}")).json()["usage"]
        assert (usage["instances"], usage["cpu"]) == (2, 5)  # one held slot (3) and the VM in the other (2)

        # DELETE gives the held slot back at once; the VM keeps its room.
        released = await admin.delete(f"/v1/reservations/{reservation['id']}")
        assert (released.status_code, released.json()["status"], released.json()["held"]) == (200, "released", 0)
        assert await allocated_cpu(admin, host) == 2
        usage = (await admin.get(f"/v1/projects/{project}")).json()["usage"]
        assert (usage["instances"], usage["cpu"]) == (1, 2)
        await me.delete(f"/v1/vms/{taking['id']}")


async def test_a_reservation_no_host_can_take_is_unschedulable_with_reasons(
    admin: httpx.AsyncClient, host: str
) -> None:
    project = await new_project(admin)
    too_big = await reserve(admin, project, host, cpu=6)  # two of 6 on a host of 8: all or nothing
    assert too_big["status"] == "unschedulable"
    assert too_big["held"] == 0
    assert too_big["status_reason"], too_big
    assert too_big["placement"]["host"] is None
    assert await allocated_cpu(admin, host) == 0
    nowhere = await reserve(admin, project, "no-such-suite")
    assert nowhere["status"] == "unschedulable"
    assert nowhere["placement"]["rejections"], nowhere


async def test_a_vm_asked_before_its_reservation_is_placed_waits_for_it(admin: httpx.AsyncClient, host: str) -> None:
    body = {"project": "default", "cpu": 2, "memory_mb": 1024, "disk_gb": 10, "host_selector": on(host)}
    reservation = (await admin.post("/v1/reservations", json=body)).json()
    # At once, in the same second: the reservation is most likely still pending.
    asked = await admin.post("/v1/vms", json=vm_body(host, "early", 2, reservation=reservation["id"]))
    assert asked.status_code == 202, asked.text
    placed = await vm_status(admin, asked.json()["id"], "scheduled", "running")
    assert placed["hypervisor_id"] == host
    used = (await admin.get(f"/v1/reservations/{reservation['id']}")).json()
    assert (used["status"], used["held"], used["used"]) == ("held", 0, 1)
    assert await allocated_cpu(admin, host) == 2
    await admin.delete(f"/v1/reservations/{reservation['id']}")
    await admin.delete(f"/v1/vms/{asked.json()['id']}")
