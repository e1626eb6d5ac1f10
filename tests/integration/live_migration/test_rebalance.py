"""Rebalancing plans on the real servers: a skewed fleet's plan moves VMs off the crowded host, only
to hosts that can migrate and take them, within the hosts selected; the plan is stored and read back;
applied, its VMs end where it said (or its moves are skipped with the reason), never more than
max_parallel migrations at once, no host over its capacity, PostgreSQL and Redis agreeing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx

from tests.integration.moving import MigrationFleet, disagreements, host_shares, open_only, running_on, settled
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet

FLEET = MigrationFleet(suite="rbl", hosts=3, tainted=True)
SUITE = FLEET.suite
HOSTS = FLEET.host_ids
CROWDED, SPARE, CANNOT_MIGRATE = HOSTS  # the last one's agent declares power, not migrate
# The hosts are tainted and only this suite's VMs tolerate it: the stack is shared, and another test's
# VM (a waiting one woken, say) placed on them would change every plan.
VM = {
    "cpu": 2,
    "memory_mb": 2048,
    "disk_gb": 20,
    "labels": {"suite": SUITE},
    "tolerations": [{"key": "suite", "value": SUITE, "effect": "NoSchedule"}],
}
ONLY_OURS = [{"key": "suite", "operator": "In", "values": [SUITE]}]


async def _vms_on(api: httpx.AsyncClient, host_id: str, count: int, servers: Servers) -> list[dict[str, Any]]:
    """``count`` running VMs on ``host_id`` (the other hosts paused meanwhile, then unpaused), once the
    snapshot agrees with PostgreSQL (a plan is computed from the snapshot: the last test's VMs gone)."""
    # The last test's VMs are deleted in PostgreSQL before their claims leave Redis: until then the
    # schedulers see the host fuller than it is.
    await eventually(
        lambda: host_shares(servers, HOSTS), lambda shares: not disagreements(shares), timeout=30, what="snapshot"
    )
    vms = await running_on(api, HOSTS, host_id, [{"name": f"{SUITE}-{n}", **VM} for n in range(count)])
    await open_only(api, HOSTS, *HOSTS)
    await eventually(
        lambda: host_shares(servers, HOSTS), lambda shares: not disagreements(shares), timeout=30, what="snapshot"
    )
    return vms


async def test_a_spread_plan_moves_vms_off_the_crowded_host_to_a_host_that_can_take_them(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    vms = await _vms_on(api, CROWDED, 4, servers)
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


async def test_a_pack_plan_empties_the_host_with_fewest_vms(api: httpx.AsyncClient, servers: Servers) -> None:
    await _vms_on(api, CROWDED, 2, servers)
    lone = (await _vms_on(api, SPARE, 1, servers))[0]
    response = await api.post("/v1/rebalance/plans", json={"goal": "pack", "max_moves": 5, "host_selector": ONLY_OURS})
    assert response.status_code == 201, response.text
    plan = response.json()
    assert [(m["vm_id"], m["from"], m["to"]) for m in plan["moves"]] == [(lone["id"], SPARE, CROWDED)]
    assert plan["score_after"] == plan["score_before"] + 1


async def test_an_unknown_plan_is_404_and_a_bad_goal_422(api: httpx.AsyncClient) -> None:
    assert (await api.get(f"/v1/rebalance/plans/{uuid.uuid4()}")).status_code == 404
    assert (await api.post("/v1/rebalance/plans", json={"goal": "shuffle"})).status_code == 422
    assert (await api.post("/v1/rebalance/plans", json={"goal": "pack", "max_moves": 0})).status_code == 422


async def test_plans_are_listed_newest_first_a_page_at_a_time(api: httpx.AsyncClient, servers: Servers) -> None:
    await _vms_on(api, CROWDED, 2, servers)
    made = []
    for goal in ("spread", "pack"):
        response = await api.post("/v1/rebalance/plans", json={"goal": goal, "host_selector": ONLY_OURS})
        assert response.status_code == 201, response.text
        made.append(response.json())
    first = await api.get("/v1/rebalance/plans", params={"limit": 1})
    assert first.status_code == 200, first.text
    assert first.json()["items"] == [made[1]]  # each as GET /v1/rebalance/plans/{id} answers it
    assert first.json()["next_cursor"]
    second = await api.get("/v1/rebalance/plans", params={"limit": 1, "cursor": first.json()["next_cursor"]})
    assert second.json()["items"] == [made[0]]
    assert made[0]["created_at"] <= made[1]["created_at"]
    default = (await api.get("/v1/rebalance/plans")).json()["items"]
    assert [plan["id"] for plan in default[:2]] == [made[1]["id"], made[0]["id"]]
    assert len(default) <= 20
    for refused in ({"limit": 0}, {"limit": 101}, {"cursor": "not-ours"}):
        assert (await api.get("/v1/rebalance/plans", params=refused)).status_code == 422, refused


async def _applied(api: httpx.AsyncClient, plan_id: str) -> dict[str, Any]:
    response = await eventually(
        lambda: api.get(f"/v1/rebalance/plans/{plan_id}"),
        lambda r: r.json()["state"] == "done",
        timeout=90,
        what=f"plan {plan_id} applied",
    )
    return dict(response.json())


async def _hosts_seen(api: httpx.AsyncClient) -> list[dict[str, Any]]:
    return [(await api.get(f"/v1/hosts/{host_id}")).json() for host_id in HOSTS]


async def _migrating(servers: Servers) -> int:
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        found: int = await conn.fetchval(
            "SELECT count(*) FROM vms WHERE status = 'migrating' AND name LIKE $1", f"{SUITE}-%"
        )
    finally:
        await conn.close()
    return found


async def test_an_applied_plan_moves_each_vm_where_it_said_one_at_a_time_without_overcommit(
    api: httpx.AsyncClient, servers: Servers, fleet: SimulatedFleet
) -> None:
    await _vms_on(api, CROWDED, 4, servers)
    for hypervisor in fleet.hypervisors.values():
        hypervisor.migration_delay = 0.3  # each migration takes a while: the samples see them in flight
    plan = (await api.post("/v1/rebalance/plans", json={"goal": "spread", "host_selector": ONLY_OURS})).json()
    assert plan["moves"], plan
    applying = await api.post(f"/v1/rebalance/plans/{plan['id']}/apply", json={"max_parallel": 1})
    assert applying.status_code == 202, applying.text
    assert (applying.json()["state"], applying.json()["max_parallel"]) == ("applying", 1)
    again = await api.post(f"/v1/rebalance/plans/{plan['id']}/apply", json={})
    assert again.status_code == 409, again.text
    samples = []
    while (await api.get(f"/v1/rebalance/plans/{plan['id']}")).json()["state"] != "done":
        samples.append(await _migrating(servers))
        await asyncio.sleep(0.05)
    assert max(samples, default=0) <= 1, samples
    assert 1 in samples, samples  # the samples did see a migration in flight
    done = await _applied(api, plan["id"])
    assert done["progress"]["moved"] == len(plan["moves"]), done
    for move in done["moves"]:
        assert move["state"] == "moved", move
        assert (await settled(api, move["vm_id"]))["hypervisor_id"] == move["to"]
    shares = await host_shares(servers, HOSTS)
    assert not disagreements(shares), disagreements(shares)
    for share in shares:
        assert share.recorded[0] <= 8, share  # cpu within capacity (no overcommit on these hosts)


async def test_a_move_the_fleet_made_invalid_since_is_skipped_with_the_reason(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    await _vms_on(api, CROWDED, 4, servers)
    plan = (await api.post("/v1/rebalance/plans", json={"goal": "spread", "host_selector": ONLY_OURS})).json()
    # Rarely (1 run in 15) the plan had one move; what the fleet looked like then is not known yet.
    assert len(plan["moves"]) >= 2, (plan, await host_shares(servers, HOSTS), await _hosts_seen(api))
    gone, kept = plan["moves"][0], plan["moves"][1:]
    assert (await api.delete(f"/v1/vms/{gone['vm_id']}")).status_code in (200, 202, 204)
    assert (await api.post(f"/v1/rebalance/plans/{plan['id']}/apply", json={"max_parallel": 2})).status_code == 202
    done = await _applied(api, plan["id"])
    by_vm = {move["vm_id"]: move for move in done["moves"]}
    assert by_vm[gone["vm_id"]]["state"] == "skipped"
    assert by_vm[gone["vm_id"]]["reason"], by_vm[gone["vm_id"]]
    for move in kept:
        assert by_vm[move["vm_id"]]["state"] == "moved", by_vm[move["vm_id"]]
    shares = await host_shares(servers, HOSTS)
    assert not disagreements(shares), disagreements(shares)


async def test_a_move_whose_target_a_rule_now_refuses_is_skipped_and_the_vm_stays_running(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    vms = await _vms_on(api, CROWDED, 4, servers)
    plan = (await api.post("/v1/rebalance/plans", json={"goal": "spread", "host_selector": ONLY_OURS})).json()
    assert plan["moves"], plan
    # After the plan, the target is paused (maintenance): the schedulers refuse it on the live state.
    assert (await api.patch(f"/v1/hosts/{SPARE}", json={"scheduling_paused": True})).status_code == 200
    assert (await api.post(f"/v1/rebalance/plans/{plan['id']}/apply", json={"max_parallel": 4})).status_code == 202
    done = await _applied(api, plan["id"])
    assert done["progress"]["skipped"] == len(plan["moves"]), done
    assert all("paused" in (move["reason"] or "") for move in done["moves"]), done["moves"]
    for vm in vms:
        after = await settled(api, vm["id"])
        assert (after["status"], after["hypervisor_id"]) == ("running", CROWDED)
