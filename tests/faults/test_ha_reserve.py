"""HA capacity on the real servers (docs/operations.md#ha-capacity): with VMSCHED_HA_RESERVE_HOSTS=1,
a zone keeps room to restart the VMs of its largest host on the others; the VM that would take that
room is refused (``ha_reserve``), VMs that never restart need no room, and ``GET /v1/capacity``
shows what is left per zone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.stack import Stack
from tests.faults.conftest import fault_stack
from tests.faults.invariants import check
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import Profile, generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

HOST = Resources(cpu=8, memory_mb=64 * 1024, disk_gb=1000)
VM = {"cpu": 2, "memory_mb": 2048, "disk_gb": 20}


@pytest.fixture(scope="module")
def reserve_stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(
        servers,
        Path(tmp_path_factory.mktemp("ha-reserve-logs")),
        schedulers=1,
        VMSCHED_HA_RESERVE_HOSTS="1",
    ) as stack:
        yield stack


@pytest.fixture
async def api(reserve_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with reserve_stack.async_client(timeout=30) as client:
        yield client


@contextlib.asynccontextmanager
async def zone(servers: Servers, api: httpx.AsyncClient, name: str) -> AsyncIterator[SimulatedFleet]:
    """Three hosts of 8 vCPUs in zone ``name``: room for 16 vCPUs of VMs that restart."""
    hosts = generate_hosts(3, prefix=name, capacity=HOST, profile=Profile.UNIFORM, labels={"zone": name})
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as simulated:
        await eventually(
            lambda: api.get("/v1/hosts"),
            lambda r: sum(1 for h in r.json() if h["id"].startswith(name) and h["status"] == "online") == 3,
            timeout=60,
            what=f"zone {name} online",
        )
        yield simulated


async def create(api: httpx.AsyncClient, zone_name: str, count: int, restart_policy: str) -> list[str]:
    bodies = [
        {
            "name": f"{zone_name}-{restart_policy}-{i}",
            **VM,
            "labels": {"zone": zone_name},
            "restart_policy": restart_policy,
        }
        for i in range(count)
    ]
    response = await api.post("/v1/vms/batch", json={"vms": bodies})
    assert response.status_code == 202, response.text
    return [vm["id"] for vm in response.json()["items"]]


async def settled(api: httpx.AsyncClient, vm_ids: list[str]) -> dict[str, dict[str, Any]]:
    async def all_settled() -> dict[str, dict[str, Any]]:
        return {vm_id: (await api.get(f"/v1/vms/{vm_id}")).json() for vm_id in vm_ids}

    return await eventually(
        all_settled,
        lambda vms: all(vm["status"] in ("running", "unschedulable") for vm in vms.values()),
        timeout=60,
        what="every VM running or unschedulable",
    )


async def failover_zone(api: httpx.AsyncClient, zone_name: str) -> dict[str, Any]:
    response = await api.get("/v1/capacity", params=VM)
    assert response.status_code == 200, response.text
    failover = response.json()["failover"]
    assert (failover["reserve_hosts"], failover["hosts_lost"]) == (1, 1)
    found: dict[str, Any] = next(z for z in failover["zones"] if z["zone"] == zone_name)
    return found


async def test_a_zone_with_room_for_exactly_one_hosts_loss_refuses_the_vm_that_would_take_it(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    async with zone(servers, api, "hra"):
        assert (await failover_zone(api, "hra"))["headroom"]["cpu"] == 16  # 24 free, 8 kept for one host
        placed = await create(api, "hra", 8, "on_failure")
        vms = await settled(api, placed)
        assert {vm["status"] for vm in vms.values()} == {"running"}
        room = await failover_zone(api, "hra")
        assert (room["headroom"]["cpu"], room["fits"]) == (0, 0)
        # The journal keeps the headroom each decision saw: a replay decides the same.
        for vm_id in placed:
            replay = await api.get(f"/v1/vms/{vm_id}/placement/replay")
            assert replay.status_code == 200, replay.text
            assert replay.json()["same"] is True, replay.json()

        refused = await create(api, "hra", 1, "on_failure")
        vm = (await settled(api, refused))[refused[0]]
        assert vm["status"] == "unschedulable"
        record = (await api.get(f"/v1/vms/{refused[0]}/placement")).json()
        assert record["decision"]["reason"] == "ha_reserve", record
        # (Hosts of earlier tests on these servers may be counted too, offline.)
        assert vm["status_reason"].startswith("ha_reserve: none of ")
        assert vm["status_reason"].endswith("ha_reserve: 3)")
        assert record["decision"]["examples"]["ha_reserve"][0]["reason"] == (
            "ha_reserve: needs 2 cpu, zone hra keeps room to restart the VMs of its 1 largest host(s) "
            "and has 0 to spare"
        )
        # Each host still has room of its own for the refused VM: only the reserve said no.
        hosts = [h for h in (await api.get("/v1/hosts")).json() if h["id"].startswith("hra")]
        assert sum(h["capacity"]["cpu"] - h["allocated"]["cpu"] for h in hosts) == 8
        report = await check(servers.asyncpg_dsn, placed + refused)
    assert report.problems == []


async def test_vms_that_never_restart_need_no_room_kept_for_them(api: httpx.AsyncClient, servers: Servers) -> None:
    async with zone(servers, api, "hrb"):
        never = await create(api, "hrb", 8, "never")
        assert {vm["status"] for vm in (await settled(api, never)).values()} == {"running"}
        # 8 vCPUs free; the largest host's VMs need none of it to restart. A host's room is what the
        # others must take: 4 at most (the emptiest host's), so two more 2-vCPU VMs that restart fit.
        assert (await failover_zone(api, "hrb"))["headroom"]["cpu"] == 4
        restartable = await create(api, "hrb", 3, "on_failure")
        vms = await settled(api, restartable)
        assert sorted(vm["status"] for vm in vms.values()) == ["running", "running", "unschedulable"]
        report = await check(servers.asyncpg_dsn, never + restartable)
    assert report.problems == []


async def test_a_vm_waiting_for_room_the_reserve_keeps_is_not_woken_until_room_outside_it_appears(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    async with zone(servers, api, "hrc"):
        placed = await create(api, "hrc", 8, "on_failure")
        assert {vm["status"] for vm in (await settled(api, placed)).values()} == {"running"}
        body = {"name": "hrc-waits", **VM, "labels": {"zone": "hrc"}, "restart_policy": "on_failure", "wait_s": 300}
        response = await api.post("/v1/vms", json=body)
        assert response.status_code == 202, response.text
        waits = response.json()["id"]
        waiting = await eventually(
            lambda: api.get(f"/v1/vms/{waits}"),
            lambda r: r.json()["status"] == "waiting",
            timeout=30,
            what="the VM waiting",
        )
        assert waiting.json()["status_reason"].startswith("ha_reserve"), waiting.json()
        # The hosts have room of their own, but the reserve keeps it: the waker leaves the VM waiting
        # (five checks of its own later, not one more decision).
        await asyncio.sleep(5.0)
        again = (await api.get(f"/v1/vms/{waits}")).json()
        assert (again["status"], again["attempt"]) == ("waiting", waiting.json()["attempt"])
        # Room outside the reserve: a VM goes, the waiting one takes its place.
        assert (await api.delete(f"/v1/vms/{placed[0]}")).status_code == 202
        await eventually(
            lambda: api.get(f"/v1/vms/{waits}"), lambda r: r.json()["status"] == "running", timeout=60, what="placed"
        )
        report = await check(servers.asyncpg_dsn, [*placed, waits])
    assert report.problems == []
