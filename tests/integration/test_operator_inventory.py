"""The operator owns the inventory, end to end through the API on the real servers: an operator's
overcommit, reserved capacity and labels take effect on the next placement and survive an agent
restart; a host is deleted with its queue, and comes back as new when its agent heartbeats again."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aio_pika
import httpx
from aio_pika.exceptions import ChannelNotFoundEntity

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology
from vmsched_contract.messages import Resources

CAPACITY = Resources(cpu=4, memory_mb=16384, disk_gb=100)


async def test_bad_patches_are_422_naming_the_field_and_change_nothing(stack: Stack, servers: Servers) -> None:
    host_id = f"inv-bad-{uuid.uuid4().hex[:6]}"
    async with await _fleet(servers, host_id), stack.async_client(timeout=30) as api:
        before = (await _online(api, host_id)).json()
        refused = {
            "nothing": ({}, ()),
            "a zero ratio": ({"overcommit": {"cpu": 0}}, ("body", "overcommit", "cpu")),
            "a huge ratio": ({"overcommit": {"memory": 1e9}}, ("body", "overcommit", "memory")),
            "negative reserved": ({"reserved": {"gpu": -1}}, ("body", "reserved", "gpu")),
            "null labels": ({"labels": None}, ("body", "labels")),
            "a bad taint effect": (
                {"taints": [{"key": "gpu", "value": "true", "effect": "NoExecute"}]},
                ("body", "taints", 0, "effect"),
            ),
            "an unknown field": ({"cpu": 8}, ("body", "cpu")),
        }
        for what, (body, field) in refused.items():
            answer = await api.patch(f"/v1/hosts/{host_id}", json=body)
            assert answer.status_code == 422, what
            if field:
                assert tuple(answer.json()["detail"][0]["loc"]) == field, (what, answer.text)
        after = (await api.get(f"/v1/hosts/{host_id}")).json()
        for kept in ("labels", "operator_labels", "taints", "overcommit", "reserved", "scheduling_paused"):
            assert after[kept] == before[kept]
        assert (await api.patch("/v1/hosts/no-such-host", json={"scheduling_paused": True})).status_code == 404
        assert (await api.delete("/v1/hosts/no-such-host")).status_code == 404


async def test_an_operators_overcommit_reserved_and_labels_take_effect_and_survive_an_agent_restart(
    stack: Stack, servers: Servers
) -> None:
    suite = f"inv-{uuid.uuid4().hex[:6]}"
    host_id = f"{suite}-a"
    # 6 cpus in a host of 4 with 1 reserved: only (4 - 1) x 2 holds it; only the operator says "gold".
    wanted = {"cpu": 6, "memory_mb": 1024, "disk_gb": 1, "labels": {"suite": suite, "tier": "gold"}}
    async with stack.async_client(timeout=30) as api:
        async with await _fleet(servers, host_id, suite=suite):
            await _online(api, host_id)
            refused = await _settled(api, await _post(api, f"{suite}-1", wanted))
            assert refused["status"] == "unschedulable"
            assert refused["status_reason"].startswith("labels:")

            patched = await api.patch(
                f"/v1/hosts/{host_id}",
                json={"labels": {"tier": "gold"}, "overcommit": {"cpu": 2.0}, "reserved": {"cpu": 1}},
            )
            assert patched.status_code == 200, patched.text
            shown = patched.json()
            assert shown["labels"] == {"suite": suite, "tier": "gold"}
            assert shown["operator_labels"] == {"tier": "gold"}
            assert shown["overcommit"]["cpu"] == 2.0
            assert shown["operator_overcommit"] == {"cpu": 2.0, "memory": None, "disk": None}
            assert shown["reserved"]["cpu"] == 1

            # The next placement sees it, and so does the (simulated) agent: its create carries the
            # host's ratios, so the 6 cpus that only the operator's overcommit makes room for run.
            placed = await _settled(api, await _post(api, f"{suite}-2", wanted))
            assert placed["hypervisor_id"] == host_id, placed
            await eventually(
                lambda: api.get(f"/v1/vms/{placed['id']}"),
                lambda r: r.json()["status"] == "running",
                timeout=30,
                what="the VM running on the host the operator's overcommit made room on",
            )
            assert (await api.delete(f"/v1/vms/{placed['id']}")).status_code == 202
            await eventually(
                lambda: api.get(f"/v1/vms/{placed['id']}"),
                lambda r: r.json()["status"] == "deleted",
                timeout=30,
                what="the VM deleted",
            )
            first_seen = (await api.get(f"/v1/hosts/{host_id}")).json()["last_heartbeat"]

        # The agent restarts and heartbeats as it always did: its own labels, ratio 1, nothing reserved.
        async with await _fleet(servers, host_id, suite=suite):
            await eventually(
                lambda: api.get(f"/v1/hosts/{host_id}"),
                lambda r: r.json()["status"] == "online" and r.json()["last_heartbeat"] != first_seen,
                timeout=30,
                what="the restarted agent heard from",
            )
            # PostgreSQL (what GET /v1/hosts shows) hears the new agent before the schedulers' Redis
            # snapshot does: a VM asked in between would find the host still offline there.
            await eventually(
                lambda: api.get("/v1/capacity", params={"cpu": 6, "memory_mb": 1024, "disk_gb": 1}),
                lambda r: any(h["host"] == host_id and h["fits"] >= 1 for h in r.json()["hosts"]),
                timeout=30,
                what="the restarted host taking the VM in the schedulers' snapshot",
            )
            host = (await api.get(f"/v1/hosts/{host_id}")).json()
            assert host["labels"] == {"suite": suite, "tier": "gold"}
            assert host["overcommit"]["cpu"] == 2.0
            assert host["reserved"]["cpu"] == 1
            again = await _settled(api, await _post(api, f"{suite}-3", wanted))
            assert again["hypervisor_id"] == host_id, again
            await eventually(
                lambda: api.get(f"/v1/vms/{again['id']}"),
                lambda r: r.json()["status"] == "running",
                timeout=30,
                what="the VM running after the agent's restart",
            )
            assert (await api.delete(f"/v1/vms/{again['id']}")).status_code == 202
            await eventually(
                lambda: api.get(f"/v1/vms/{again['id']}"),
                lambda r: r.json()["status"] == "deleted",
                timeout=30,
                what="the VM deleted",
            )


async def test_a_deleted_host_goes_with_its_queue_and_comes_back_as_new(stack: Stack, servers: Servers) -> None:
    suite = f"del-{uuid.uuid4().hex[:6]}"
    host_id = f"{suite}-a"
    small = {"cpu": 1, "memory_mb": 512, "disk_gb": 1, "labels": {"suite": suite}}
    async with stack.async_client(timeout=30) as api:
        async with await _fleet(servers, host_id, suite=suite):
            await _online(api, host_id)
            vm = await _settled(api, await _post(api, f"{suite}-1", small))
            assert vm["hypervisor_id"] == host_id
            occupied = await api.delete(f"/v1/hosts/{host_id}")
            assert occupied.status_code == 409
            assert vm["id"] in occupied.json()["detail"]
            assert (await api.delete(f"/v1/vms/{vm['id']}")).status_code == 202
            await eventually(
                lambda: api.get(f"/v1/vms/{vm['id']}"),
                lambda r: r.json()["status"] == "deleted",
                timeout=30,
                what="the VM deleted",
            )
        # The hypervisor is decommissioned: its agent stopped, then the host is deleted. (Once its
        # last heartbeat is folded: one still in flight would declare the host again, as new.)
        await _last_heartbeat_folded(api, host_id)
        assert await _queue_exists(servers, host_id)
        deleted = await api.delete(f"/v1/hosts/{host_id}")
        assert deleted.status_code == 204, deleted.text
        assert (await api.get(f"/v1/hosts/{host_id}")).status_code == 404
        assert host_id not in [host["id"] for host in (await api.get("/v1/hosts")).json()]
        assert not await _queue_exists(servers, host_id)
        nowhere = await _settled(api, await _post(api, f"{suite}-2", small))
        assert nowhere["status"] == "unschedulable"

        # It heartbeats again: a new host, with a new queue the agent consumes.
        async with await _fleet(servers, host_id, suite=suite):
            back = (await _online(api, host_id)).json()
            assert back["vm_count"] == 0
            # Declared beside the heartbeat's fold (vmsched_gateway.heartbeats), a moment after it.
            await _queue_declared(servers, host_id)
            vm = await _settled(api, await _post(api, f"{suite}-3", small))
            assert vm["hypervisor_id"] == host_id
            await eventually(
                lambda: api.get(f"/v1/vms/{vm['id']}"),
                lambda r: r.json()["status"] == "running",
                timeout=30,
                what="the VM running on the host registered again",
            )
            assert (await api.delete(f"/v1/vms/{vm['id']}")).status_code == 202
            await eventually(
                lambda: api.get(f"/v1/vms/{vm['id']}"),
                lambda r: r.json()["status"] == "deleted",
                timeout=30,
                what="the VM deleted",
            )


async def _fleet(servers: Servers, host_id: str, *, suite: str | None = None) -> SimulatedFleet:
    labels = {"suite": suite} if suite else {}
    return await enrolled_fleet(
        servers, [HostSpec(id=host_id, capacity=CAPACITY, labels=labels)], heartbeat_interval=1.0
    )


async def _last_heartbeat_folded(api: httpx.AsyncClient, host_id: str) -> None:
    """Wait until the host's last heartbeat stays the same for two heartbeat intervals."""
    seen: list[object] = []

    async def probe() -> list[object]:
        seen.append((await api.get(f"/v1/hosts/{host_id}")).json()["last_heartbeat"])
        await asyncio.sleep(0.5)
        return seen

    await eventually(probe, lambda s: len(s) >= 5 and len(set(map(str, s[-5:]))) == 1, timeout=30, what="silence")


async def _online(api: httpx.AsyncClient, host_id: str) -> httpx.Response:
    return await eventually(
        lambda: api.get(f"/v1/hosts/{host_id}"),
        lambda r: r.status_code == 200 and r.json()["status"] == "online",
        timeout=30,
        what=f"{host_id} online",
    )


async def _post(api: httpx.AsyncClient, name: str, body: dict[str, Any]) -> str:
    created = await api.post("/v1/vms", json={"name": name, **body})
    assert created.status_code == 202, created.text
    vm_id: str = created.json()["id"]
    return vm_id


async def _settled(api: httpx.AsyncClient, vm_id: str) -> dict[str, Any]:
    found = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] not in ("pending",),
        timeout=30,
        what=f"VM {vm_id} decided",
    )
    vm: dict[str, Any] = found.json()
    return vm


async def _queue_declared(servers: Servers, host_id: str, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await _queue_exists(servers, host_id):
        assert asyncio.get_running_loop().time() < deadline, f"agent.{host_id} not declared within {timeout:g} s"
        await asyncio.sleep(0.2)


async def _queue_exists(servers: Servers, host_id: str) -> bool:
    """Asked of the broker with a passive declare (which closes the channel when the queue is missing)."""
    connection = await aio_pika.connect(servers.amqp_url)
    async with connection:
        channel = await connection.channel()
        try:
            await channel.declare_queue(topology.agent_queue_name(host_id), passive=True)
        except ChannelNotFoundEntity:
            return False
        return True


async def test_a_vm_migrates_onto_room_only_an_operators_overcommit_makes(stack: Stack, servers: Servers) -> None:
    # Two hosts of 4 cpus; the target's operator overcommit of 2 lets it hold 8. Its agent is told
    # the ratios with the migration's prepare_migration, so it takes the 3 cpus its own ratio of 1
    # would refuse (the migration would roll back).
    suite = f"inv-move-{uuid.uuid4().hex[:6]}"
    source, target = f"{suite}-a", f"{suite}-b"
    hosts = [
        HostSpec(id=source, capacity=CAPACITY, labels={"suite": suite}),
        HostSpec(id=target, capacity=CAPACITY, labels={"suite": suite, "role": "target"}),
    ]
    fleet = await enrolled_fleet(servers, hosts, heartbeat_interval=1.0)
    async with fleet, stack.async_client(timeout=30) as api:
        await _online(api, source)
        await _online(api, target)
        assert (await api.patch(f"/v1/hosts/{target}", json={"scheduling_paused": True})).status_code == 200
        mover = await _running(api, await _post(api, f"{suite}-mover", _three_cpus(suite)))
        assert mover["hypervisor_id"] == source
        patched = await api.patch(f"/v1/hosts/{target}", json={"scheduling_paused": False, "overcommit": {"cpu": 2.0}})
        assert patched.status_code == 200, patched.text
        resident = await _running(api, await _post(api, f"{suite}-resident", _three_cpus(suite, role="target")))
        assert resident["hypervisor_id"] == target

        moving = await api.post(f"/v1/vms/{mover['id']}/migrate", json={"target_host": target})
        assert moving.status_code == 202, moving.text
        moved = await eventually(
            lambda: api.get(f"/v1/vms/{mover['id']}"),
            lambda r: r.json()["status"] == "running" and r.json()["task"] is None,
            timeout=30,
            what="the migration ended",
        )
        assert (moved.json()["hypervisor_id"], moved.json()["status_reason"]) == (target, None), moved.json()
        assert fleet.hypervisors[target].used.cpu == 6  # beyond its 4, by the operator's ratio

        for vm in (mover, resident):
            assert (await api.delete(f"/v1/vms/{vm['id']}")).status_code == 202


def _three_cpus(suite: str, **labels: str) -> dict[str, Any]:
    return {"cpu": 3, "memory_mb": 1024, "disk_gb": 1, "labels": {"suite": suite, **labels}}


async def _running(api: httpx.AsyncClient, vm_id: str) -> dict[str, Any]:
    found = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] == "running",
        timeout=30,
        what=f"VM {vm_id} running",
    )
    vm: dict[str, Any] = found.json()
    return vm
