"""Draining a host on the real servers: every VM migrated away (never more than max_parallel at once,
nothing stopped, nothing lost, PostgreSQL and Redis agreeing), the host draining then drained, then
back in service; a VM that cannot move listed with its reason and left running there."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx

from devtools.stack import Stack, api_client
from tests.integration.moving import MigrationFleet, disagreements, host_shares, open_only, running, running_on, settled
from tests.integration.test_identity import new_project, new_token
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet

FLEET = MigrationFleet(suite="drn", hosts=3)
SUITE = FLEET.suite
HOSTS = FLEET.host_ids
DRAINED, SPARE, CANNOT_MIGRATE = HOSTS  # the last one's agent declares power, not migrate
VM = {"cpu": 2, "memory_mb": 2048, "disk_gb": 20, "labels": {"suite": SUITE}}
VMS = 4  # a host holds 4 (8 CPUs)


async def _vms_on(api: httpx.AsyncClient, host_id: str, count: int) -> list[dict[str, Any]]:
    """``count`` running VMs on ``host_id`` (the other hosts paused meanwhile)."""
    return await running_on(api, HOSTS, host_id, [{"name": f"{SUITE}-{n}", **VM} for n in range(count)])


async def _migrating_from(servers: Servers, host_id: str) -> int:
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        found: int = await conn.fetchval(
            "SELECT count(*) FROM vms WHERE status = 'migrating' AND hypervisor_id = $1", host_id
        )
    finally:
        await conn.close()
    return found


async def test_a_drain_moves_every_vm_away_two_at_a_time_and_the_host_comes_back_after(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    vms = await _vms_on(api, DRAINED, VMS)
    assert (await api.patch(f"/v1/hosts/{SPARE}", json={"scheduling_paused": False})).status_code == 200
    for hypervisor in fleet.hypervisors.values():
        hypervisor.migration_delay = 0.3  # each migration takes about a second: the samples see them in flight
    started = await api.post(f"/v1/hosts/{DRAINED}/drain", json={"max_parallel": 2, "deadline_s": 120})
    assert started.status_code == 202, started.text
    assert (started.json()["state"], started.json()["evacuate"]) == ("draining", True)
    host = (await api.get(f"/v1/hosts/{DRAINED}")).json()
    assert (host["status"], host["scheduling_paused"]) == ("draining", True)
    again = await api.post(f"/v1/hosts/{DRAINED}/drain", json={})
    assert again.status_code == 409, again.text

    # Sample while it runs: never more than max_parallel migrations at once.
    most = 0
    while (await api.get(f"/v1/hosts/{DRAINED}/drain")).json()["state"] == "draining":
        most = max(most, await _migrating_from(servers, DRAINED))
        assert most <= 2
        await asyncio.sleep(0.05)
    progress = (await api.get(f"/v1/hosts/{DRAINED}/drain")).json()
    assert progress["state"] == "drained", progress
    assert most >= 1
    assert sorted(m["vm_id"] for m in progress["moved"]) == sorted(vm["id"] for vm in vms)
    assert {m["to"] for m in progress["moved"]} == {SPARE}
    assert (progress["in_flight"], progress["stuck"], progress["queued"]) == ([], [], [])
    assert progress["ended_at"] is not None
    assert (await api.get(f"/v1/hosts/{DRAINED}")).json()["status"] == "drained"

    # Nothing stopped, nothing lost: each VM runs once, on the spare host, and both stores agree.
    for vm in vms:
        moved = await settled(api, vm["id"])
        assert (moved["status"], moved["hypervisor_id"]) == ("running", SPARE)
        assert fleet.host_of(uuid.UUID(vm["id"])) == SPARE
    await eventually(
        lambda: asyncio.sleep(0, fleet.hypervisors[DRAINED].vms), lambda left: not left, timeout=10, what="cleaned up"
    )
    assert disagreements(await host_shares(servers, HOSTS)) == []

    # Patched: the drain ended, the host takes VMs again.
    assert (await api.delete(f"/v1/hosts/{DRAINED}/drain")).status_code == 204
    host = (await api.get(f"/v1/hosts/{DRAINED}")).json()
    assert (host["status"], host["scheduling_paused"]) == ("online", False)
    assert (await api.get(f"/v1/hosts/{DRAINED}/drain")).status_code == 404


async def _group_members_down(servers: Servers, group_id: str) -> tuple[int, int]:
    """(members not running, members migrating) of the group, as PostgreSQL has them now."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status <> 'running') AS down, "
            "count(*) FILTER (WHERE status = 'migrating') AS moving "
            "FROM vms WHERE server_group = $1::uuid AND status <> 'deleted'",
            group_id,
        )
    finally:
        await conn.close()
    assert row is not None
    return int(row["down"]), int(row["moving"])


async def test_a_drain_takes_one_member_of_a_group_at_a_time_when_its_disruption_budget_is_one(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    group = await api.post(
        "/v1/server-groups", json={"name": f"{SUITE}-pdb", "policy": "soft-anti-affinity", "max_unavailable": 1}
    )
    assert group.status_code == 201, group.text
    assert group.json()["max_unavailable"] == 1
    group_id = group.json()["id"]
    for other in HOSTS:
        assert (await api.patch(f"/v1/hosts/{other}", json={"scheduling_paused": other != DRAINED})).status_code == 200
    members = [await running(api, {"name": f"{SUITE}-m{n}", **VM, "server_group": group_id}) for n in range(3)]
    assert {vm["hypervisor_id"] for vm in members} == {DRAINED}
    assert (await api.patch(f"/v1/hosts/{SPARE}", json={"scheduling_paused": False})).status_code == 200
    for hypervisor in fleet.hypervisors.values():
        hypervisor.migration_delay = 0.3  # each migration takes about a second: the samples see them in flight
    started = await api.post(f"/v1/hosts/{DRAINED}/drain", json={"max_parallel": 4, "deadline_s": 120})
    assert started.status_code == 202, started.text

    # Sample while it runs: never two members down at once, though four migrations may run.
    most, budget_reasons = 0, set()
    while (progress := (await api.get(f"/v1/hosts/{DRAINED}/drain")).json())["state"] == "draining":
        down, moving = await _group_members_down(servers, group_id)
        assert down <= 1, (down, moving)
        assert moving <= 1, (down, moving)
        most = max(most, moving)
        budget_reasons |= {s["reason"].split(":")[0] for s in progress["stuck"]}
        await asyncio.sleep(0.05)
    assert progress["state"] == "drained", progress
    assert most == 1
    # The others waited for the budget, and said so (a sample may also catch a migration the sweep has
    # started and not yet recorded: "migrating (not by this drain)").
    assert "disruption_budget" in budget_reasons
    assert sorted(m["vm_id"] for m in progress["moved"]) == sorted(vm["id"] for vm in members)
    for vm in members:
        assert (await settled(api, vm["id"]))["hypervisor_id"] == SPARE
    assert disagreements(await host_shares(servers, HOSTS)) == []


async def test_a_vm_that_cannot_move_is_listed_with_the_reason_and_left_running_past_the_deadline(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    (vm,) = await _vms_on(api, CANNOT_MIGRATE, 1)
    assert (await api.patch(f"/v1/hosts/{SPARE}", json={"scheduling_paused": False})).status_code == 200
    started = await api.post(f"/v1/hosts/{CANNOT_MIGRATE}/drain", json={"deadline_s": 3})
    assert started.status_code == 202, started.text
    response = await eventually(
        lambda: api.get(f"/v1/hosts/{CANNOT_MIGRATE}/drain"),
        lambda r: r.json()["state"] == "timed_out",
        timeout=30,
        what="the drain past its deadline",
    )
    progress = response.json()
    assert (progress["moved"], progress["in_flight"]) == ([], [])
    assert [s["vm_id"] for s in progress["stuck"]] == [vm["id"]]
    assert "cannot migrate" in progress["stuck"][0]["reason"], progress
    still = (await api.get(f"/v1/vms/{vm['id']}")).json()
    assert (still["status"], still["hypervisor_id"]) == ("running", CANNOT_MIGRATE)
    assert fleet.host_of(uuid.UUID(vm["id"])) == CANNOT_MIGRATE
    assert (await api.get(f"/v1/hosts/{CANNOT_MIGRATE}")).json()["status"] == "draining"


async def test_drains_of_unknown_hosts_are_not_found(api: httpx.AsyncClient) -> None:
    assert (await api.post("/v1/hosts/no-such-host/drain", json={})).status_code == 404
    assert (await api.get("/v1/hosts/no-such-host/drain")).status_code == 404
    assert (await api.delete("/v1/hosts/no-such-host/drain")).status_code == 404
    bad = await api.post(f"/v1/hosts/{DRAINED}/drain", json={"max_parallel": 0})
    assert bad.status_code == 422


async def test_a_drain_moves_a_vm_on_a_reserved_slot_and_leaves_the_slot_still_held(
    stack: Stack, api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    await open_only(api, HOSTS, DRAINED)
    project = await new_project(api)
    body = {"project": project, "cpu": 2, "memory_mb": 2048, "disk_gb": 20, "count": 2}
    selector = [{"key": "suite", "operator": "In", "values": [SUITE]}]
    created = await api.post("/v1/reservations", json={**body, "host_selector": selector})
    assert created.status_code == 201, created.text
    reservation_id = created.json()["id"]
    held = await eventually(
        lambda: api.get(f"/v1/reservations/{reservation_id}"),
        lambda r: r.json()["status"] != "pending",
        timeout=30,
        what="the reservation placed",
    )
    assert (held.json()["status"], held.json()["hosts"]) == ("held", [DRAINED])
    try:
        token = (await new_token(api, project, "vms:read", "vms:write"))["token"]
        async with api_client(stack.api_url, token, timeout=30) as mine:
            vm = await running(mine, {"name": f"{SUITE}-reserved", **VM, "reservation": reservation_id})
        assert vm["hypervisor_id"] == DRAINED
        assert (await api.patch(f"/v1/hosts/{SPARE}", json={"scheduling_paused": False})).status_code == 200
        started = await api.post(f"/v1/hosts/{DRAINED}/drain", json={"deadline_s": 60})
        assert started.status_code == 202, started.text
        response = await eventually(
            lambda: api.get(f"/v1/hosts/{DRAINED}/drain"),
            lambda r: r.json()["state"] != "draining",
            timeout=60,
            what="the drain over",
        )
        # The VM moved; the slot still held is room, not a VM: it stays, and the host is drained.
        progress = response.json()
        assert (progress["state"], [m["vm_id"] for m in progress["moved"]]) == ("drained", [vm["id"]]), progress
        moved = await settled(api, vm["id"])
        assert (moved["status"], moved["hypervisor_id"]) == ("running", SPARE)
        shares = await host_shares(servers, HOSTS)
        assert disagreements(shares) == []
        assert {s.host_id: s.recorded for s in shares}[DRAINED] == (2, 2048, 20, 0, 1)
        refused = await api.delete(f"/v1/hosts/{DRAINED}")
        assert refused.status_code == 409, refused.text
    finally:
        assert (await api.delete(f"/v1/reservations/{reservation_id}")).status_code == 200
    await eventually(
        lambda: host_shares(servers, HOSTS),
        lambda found: disagreements(found) == [] and {s.host_id: s.recorded for s in found}[DRAINED][4] == 0,
        timeout=10,
        what="the held slot given back",
    )
