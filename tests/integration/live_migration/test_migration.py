"""Moving VMs on the real servers: live migration (the target chosen by the engine or named, every
step's failure rolled back, hosts that cannot migrate left alone) and power states."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from devtools.stack import Stack, api_client
from tests.faults.events import EventCounter
from tests.integration.moving import MigrationFleet, claims_of, disagreements, host_shares, open_only, running, settled
from tests.integration.test_identity import new_project, new_token
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology

FLEET = MigrationFleet(suite="mig", hosts=4)
SUITE = FLEET.suite
HOSTS = FLEET.host_ids
CANNOT_MIGRATE = HOSTS[3]  # zone z4: its agent declares power, not migrate
VM = {"cpu": 2, "memory_mb": 2048, "disk_gb": 20, "labels": {"suite": SUITE}}
SHARE = (2, 2048, 20, 0, 1)
NOTHING = (0, 0, 0, 0, 0)
_ON_SUITE = [{"key": "suite", "operator": "In", "values": [SUITE]}]


async def _vm_and_hosts(servers: Servers, vm_id: str) -> tuple[str, str | None, dict[str, tuple[int, ...]]]:
    """The VM's status and migration target, and every host's allocations, read in one transaction."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            vm = await conn.fetchrow("SELECT status, migration_target FROM vms WHERE id = $1", uuid.UUID(vm_id))
            hosts = await conn.fetch(
                "SELECT id, alloc_cpu, alloc_memory_mb, alloc_disk_gb, alloc_gpu FROM hosts WHERE id = ANY($1::text[])",
                HOSTS,
            )
    finally:
        await conn.close()
    assert vm is not None
    held: dict[str, tuple[int, ...]] = {
        h["id"]: (h["alloc_cpu"], h["alloc_memory_mb"], h["alloc_disk_gb"], h["alloc_gpu"]) for h in hosts
    }
    status: str = vm["status"]
    target: str | None = vm["migration_target"]
    return status, target, held


async def _shares(servers: Servers) -> dict[str, tuple[int, ...]]:
    found = await host_shares(servers, HOSTS)
    assert disagreements(found) == []
    return {s.host_id: s.recorded for s in found}


async def test_a_migration_moves_the_vm_to_a_host_the_engine_chose_and_frees_the_source_only_after(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    await open_only(api, HOSTS, HOSTS[0])
    vm = await running(api, {"name": f"{SUITE}-move", **VM})
    source = vm["hypervisor_id"]
    assert source == HOSTS[0]
    await open_only(api, HOSTS, *HOSTS)
    for hypervisor in fleet.hypervisors.values():
        hypervisor.migration_delay = 0.4  # each step takes a while: the samples below see it in flight
    async with (
        EventCounter(servers.amqp_url, topology.VM_MIGRATING) as migrating,
        EventCounter(servers.amqp_url, topology.VM_MIGRATED) as migrated,
    ):
        response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={})
        assert response.status_code == 202, response.text
        assert (response.json()["status"], response.json()["task"]) == ("migrating", "choosing_target")
        # Sample the truth while it moves (the VM and the hosts in one snapshot of PostgreSQL):
        # whenever a target is claimed, both hosts hold the VM.
        seen_in_flight = 0
        while True:
            status, target, held = await _vm_and_hosts(servers, vm["id"])
            if status != "migrating":
                break
            assert held[source] == SHARE[:4], held
            if target is not None:
                seen_in_flight += 1
                assert held[target] == SHARE[:4], held
            await asyncio.sleep(0.05)
        await eventually(
            lambda: asyncio.sleep(0, migrated.total), lambda n: n >= 1, timeout=10, what="vm.migrated heard"
        )
    moved = await settled(api, vm["id"])
    target = moved["hypervisor_id"]
    assert seen_in_flight > 0
    assert moved["status"] == "running"
    assert target not in (source, CANNOT_MIGRATE)
    assert moved["migration_target"] is None
    assert moved["migrations"] == 1
    shares = await _shares(servers)
    assert shares[source] == NOTHING
    assert shares[target] == SHARE
    assert await claims_of(servers, vm["id"]) == {"claim": target, "target": None}
    assert migrating.hosts_by_vm.get(vm["id"]) is None  # vm.migrating names "from" and "to", not hypervisor_id
    assert len(migrating.by_vm[vm["id"]]) >= 1
    assert len(migrated.by_vm[vm["id"]]) >= 1
    assert fleet.host_of(uuid.UUID(vm["id"])) == target
    # The source cleans up once the target runs it: what it held of the VM goes.
    await eventually(
        lambda: asyncio.sleep(0, fleet.hypervisors[source].vms),
        lambda vms: not vms,
        timeout=10,
        what="the source cleaned up",
    )
    target_commands = [c.action.value for c in fleet.received(target) if str(c.vm_id) == vm["id"]]
    source_commands = [c.action.value for c in fleet.received(source) if str(c.vm_id) == vm["id"]]
    assert target_commands == ["prepare_migration", "finish_migration"]
    assert source_commands == ["create", "migrate", "cleanup_migration"]


@pytest.mark.parametrize(
    ("step", "reason"),
    [("prepare_migration", "prepare_migration"), ("migrate_vm", "migrate"), ("finish_migration", "finish_migration")],
)
async def test_a_step_that_fails_rolls_back_to_the_source_and_frees_the_target(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers, step: str, reason: str
) -> None:
    await open_only(api, HOSTS, HOSTS[0])
    vm = await running(api, {"name": f"{SUITE}-fail-{step}", **VM})
    source = vm["hypervisor_id"]
    await open_only(api, HOSTS, HOSTS[0], HOSTS[1])
    for hypervisor in fleet.hypervisors.values():
        hypervisor.fail_steps.add(step)
    async with EventCounter(servers.amqp_url, topology.VM_MIGRATION_FAILED) as failed:
        response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": HOSTS[1]})
        assert response.status_code == 202, response.text
        after = await settled(api, vm["id"])
        await eventually(lambda: asyncio.sleep(0, failed.total), lambda n: n >= 1, timeout=10, what="the event")
    assert (after["status"], after["hypervisor_id"], after["migration_target"]) == ("running", source, None)
    assert f"{reason} failed" in after["status_reason"], after["status_reason"]
    shares = await _shares(servers)
    assert (shares[source], shares[HOSTS[1]]) == (SHARE, NOTHING)
    assert await claims_of(servers, vm["id"]) == {"claim": source, "target": None}
    # The target dropped what it prepared or took; the source runs the VM.
    await eventually(
        lambda: asyncio.sleep(0, (fleet.hypervisors[HOSTS[1]].vms, fleet.host_of(uuid.UUID(vm["id"])))),
        lambda seen: not seen[0] and seen[1] == source,
        timeout=10,
        what="the target aborted and the source runs the VM",
    )


async def test_a_host_that_cannot_migrate_is_never_a_source_nor_a_target(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    z1_or_z4 = {"host_selector": [{"key": "zone", "operator": "In", "values": ["z1", "z4"]}]}
    await open_only(api, HOSTS, HOSTS[0])
    on_z1 = await running(api, {"name": f"{SUITE}-z1", **VM, **z1_or_z4})
    await open_only(api, HOSTS, CANNOT_MIGRATE)
    on_z4 = await running(api, {"name": f"{SUITE}-z4", **VM, **z1_or_z4})
    assert (on_z1["hypervisor_id"], on_z4["hypervisor_id"]) == (HOSTS[0], CANNOT_MIGRATE)
    await open_only(api, HOSTS, *HOSTS)
    # Its own host cannot migrate: 409, nothing changed.
    refused = await api.post(f"/v1/vms/{on_z4['id']}/migrate", json={})
    assert refused.status_code == 409
    assert "cannot migrate" in refused.json()["detail"]
    assert (await api.get(f"/v1/vms/{on_z4['id']}")).json()["status"] == "running"
    # Named as the target: 409.
    named = await api.post(f"/v1/vms/{on_z1['id']}/migrate", json={"target_host": CANNOT_MIGRATE})
    assert named.status_code == 409
    assert CANNOT_MIGRATE in named.json()["detail"]
    # The only other host its rules allow cannot migrate: the engine finds no target.
    response = await api.post(f"/v1/vms/{on_z1['id']}/migrate", json={})
    assert response.status_code == 202
    after = await settled(api, on_z1["id"])
    assert (after["status"], after["hypervisor_id"]) == ("running", HOSTS[0])
    assert "migration" in after["status_reason"], after["status_reason"]
    assert not [c for c in fleet.received(CANNOT_MIGRATE) if c.action.value == "prepare_migration"]
    assert disagreements(await host_shares(servers, HOSTS)) == []


async def test_a_named_target_is_held_to_every_rule_of_the_vm(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    await open_only(api, HOSTS, HOSTS[0])
    vm = await running(api, {"name": f"{SUITE}-named", **VM})
    await open_only(api, HOSTS, HOSTS[0], HOSTS[2])
    # A paused host is no target, even when named: the rule that refused it, with the reason.
    response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": HOSTS[1]})
    assert response.status_code == 202
    after = await settled(api, vm["id"])
    assert after["hypervisor_id"] == HOSTS[0]
    assert "paused" in after["status_reason"], after["status_reason"]
    placement = (await api.get(f"/v1/vms/{vm['id']}/placement")).json()["decision"]
    assert placement["reason"] == "paused"
    # An open one is.
    response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": HOSTS[2]})
    assert response.status_code == 202
    moved = await settled(api, vm["id"])
    assert (moved["hypervisor_id"], moved["migrations"]) == (HOSTS[2], 2)
    assert (await _shares(servers))[HOSTS[2]] == SHARE


@pytest.mark.parametrize(
    ("body", "why"),
    [({"target_host": f"{SUITE}-0001"}, "own host"), ({"target_host": "no-such-host"}, "no host")],
)
async def test_a_target_that_can_never_take_the_vm_is_a_422_naming_the_field(
    api: httpx.AsyncClient, fleet: SimulatedFleet, body: dict[str, Any], why: str
) -> None:
    await open_only(api, HOSTS, HOSTS[0])
    vm = await running(api, {"name": f"{SUITE}-bad-target", **VM})
    response = await api.post(f"/v1/vms/{vm['id']}/migrate", json=body)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "target_host"]
    assert why in error["msg"]
    assert (await api.get(f"/v1/vms/{vm['id']}")).json()["status"] == "running"


async def test_unknown_vms_are_404_and_a_vm_not_running_is_409(api: httpx.AsyncClient, fleet: SimulatedFleet) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    for action in ("migrate", "stop", "start"):
        assert (await api.post(f"/v1/vms/{unknown}/{action}")).status_code == 404
    await open_only(api, HOSTS)
    pending = await api.post("/v1/vms", json={"name": f"{SUITE}-nowhere", **VM, "wait_s": 60})
    vm_id = pending.json()["id"]
    for action in ("migrate", "stop", "start"):
        response = await api.post(f"/v1/vms/{vm_id}/{action}")
        assert response.status_code == 409, (action, response.text)
    await api.delete(f"/v1/vms/{vm_id}")


async def test_stop_and_start_keep_the_vm_on_its_host_holding_its_share(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    await open_only(api, HOSTS, HOSTS[1])
    vm = await running(api, {"name": f"{SUITE}-power", **VM})
    host = vm["hypervisor_id"]
    before = await _scheduling_info(api, host)
    stopping = await api.post(f"/v1/vms/{vm['id']}/stop")
    assert stopping.status_code == 202
    assert (stopping.json()["status"], stopping.json()["task"]) == ("stopped", "stopping")
    stopped = await settled(api, vm["id"])
    assert (stopped["status"], stopped["hypervisor_id"], stopped["status_reason"]) == ("stopped", host, None)
    assert vm["id"] in {str(v) for v in fleet.hypervisors[host].stopped}
    assert (await _shares(servers))[host] == SHARE  # the host keeps its room
    # ...which its scheduling info counts apart from the VMs that run there.
    after = await _scheduling_info(api, host)
    assert (after["running_vms"], after["vms_holding_room"]) == (before["running_vms"] - 1, before["vms_holding_room"])
    assert (await api.post(f"/v1/vms/{vm['id']}/stop")).status_code == 409
    assert (await api.post(f"/v1/vms/{vm['id']}/migrate")).status_code == 409
    starting = await api.post(f"/v1/vms/{vm['id']}/start")
    assert starting.status_code == 202
    assert (starting.json()["status"], starting.json()["task"]) == ("running", "starting")
    started = await settled(api, vm["id"])
    assert (started["status"], started["hypervisor_id"]) == ("running", host)
    assert not fleet.hypervisors[host].stopped
    assert (await api.post(f"/v1/vms/{vm['id']}/start")).status_code == 409
    assert (await _shares(servers))[host] == SHARE
    assert await claims_of(servers, vm["id"]) == {"claim": host, "target": None}


async def test_a_vm_that_took_a_reserved_slot_migrates_with_its_room_and_the_slots_still_held_stay(
    stack: Stack, api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    # The slot's room became the VM's when it took it (the slot is "used"): the VM's share moves as
    # any VM's, the source gives it back, and the slot still held stays on the source.
    await open_only(api, HOSTS, HOSTS[0])
    project = await new_project(api)
    body = {"project": project, "cpu": 2, "memory_mb": 2048, "disk_gb": 20, "count": 2}
    created = await api.post("/v1/reservations", json={**body, "host_selector": _ON_SUITE})
    assert created.status_code == 201, created.text
    reservation_id = created.json()["id"]
    held = await eventually(
        lambda: api.get(f"/v1/reservations/{reservation_id}"),
        lambda r: r.json()["status"] != "pending",
        timeout=30,
        what="the reservation placed",
    )
    assert (held.json()["status"], held.json()["hosts"]) == ("held", [HOSTS[0]])
    token = (await new_token(api, project, "vms:read", "vms:write"))["token"]
    try:
        async with api_client(stack.api_url, token, timeout=30) as mine:
            vm = await running(mine, {"name": f"{SUITE}-reserved", **VM, "reservation": reservation_id})
            assert vm["hypervisor_id"] == HOSTS[0]
            slot = (2, 2048, 20, 0, 1)
            assert (await _shares(servers))[HOSTS[0]] == (4, 4096, 40, 0, 2)  # the VM and the slot still held
            await open_only(api, HOSTS, *HOSTS)
            response = await mine.post(f"/v1/vms/{vm['id']}/migrate", json={})
            assert response.status_code == 202, response.text
            moved = await settled(mine, vm["id"])
        assert (moved["status"], moved["migrations"], moved["reservation"]) == ("running", 1, reservation_id)
        assert moved["hypervisor_id"] not in (HOSTS[0], CANNOT_MIGRATE)
        shares = await _shares(servers)
        assert (shares[HOSTS[0]], shares[moved["hypervisor_id"]]) == (slot, SHARE)
        after = (await api.get(f"/v1/reservations/{reservation_id}")).json()
        assert (after["held"], after["used"]) == (1, 1)
        # Deleting the host is still refused while the slot is held there.
        refused = await api.delete(f"/v1/hosts/{HOSTS[0]}")
        assert refused.status_code == 409, refused.text
    finally:
        assert (await api.delete(f"/v1/reservations/{reservation_id}")).status_code == 200
    await eventually(
        lambda: host_shares(servers, HOSTS),
        lambda found: disagreements(found) == [] and {s.host_id: s.recorded for s in found}[HOSTS[0]] == NOTHING,
        timeout=10,
        what="the held slot given back to the source",
    )


async def _scheduling_info(api: httpx.AsyncClient, host: str) -> dict[str, Any]:
    answer = await api.get(f"/v1/hosts/{host}/scheduling-info", headers={"Accept": "application/json"})
    assert answer.status_code == 200, answer.text
    info: dict[str, Any] = answer.json()
    return info
