"""Storage pools end to end on the real servers (docs/placement.md#storage-pools).

Two hosts reach one shared pool (the operator's capacity and tags), one of them also a local pool
of its own. Volumes go first fit to a pool with the tags and room; a shared pool's space is counted
once whichever host takes the VM; a VM whose volumes fit no pool is unschedulable with reason
``storage``; PostgreSQL and the Redis snapshot count the same; a pool in use cannot be deleted.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from redis.asyncio import Redis

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.moving import running, settled
from tests.integration.rows import delete_keys
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import Resources
from vmsched_contract.storage import PoolKind, StoragePool
from vmsched_domain.storage import PoolRoom
from vmsched_redis.snapshot import Snapshot

PLACED = ("scheduled", "running")


async def test_volumes_take_local_and_shared_pools_first_fit_and_a_shared_pool_is_counted_once(
    stack: Stack, servers: Servers
) -> None:
    suite = f"pools-{uuid.uuid4().hex[:6]}"
    shared, with_local, shared_only = f"{suite}-ceph", f"{suite}-a", f"{suite}-b"
    reach = StoragePool(name=shared, kind=PoolKind.SHARED)
    own = StoragePool(name="local", kind=PoolKind.LOCAL, capacity_gb=100, tags=["ssd"])
    capacity = Resources(cpu=16, memory_mb=65536, disk_gb=100)
    hosts = [
        HostSpec(id=with_local, capacity=capacity, labels={"suite": suite}, storage_pools=[own, reach]),
        HostSpec(id=shared_only, capacity=capacity, labels={"suite": suite}, storage_pools=[reach]),
    ]
    fleet = await enrolled_fleet(servers, hosts, heartbeat_interval=1.0)
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    snapshot = Snapshot(redis, servers.redis_key_prefix)
    try:
        async with fleet, stack.async_client(timeout=30) as api:
            for host_id in (with_local, shared_only):
                await eventually(
                    lambda host_id=host_id: api.get(f"/v1/hosts/{host_id}"),  # type: ignore[misc]
                    lambda r: r.status_code == 200 and r.json()["status"] == "online",
                    timeout=30,
                    what=f"{host_id} online",
                )
            listed = (await api.get(f"/v1/hosts/{with_local}")).json()["storage_pools"]
            assert listed == [own.model_dump(mode="json"), reach.model_dump(mode="json")]
            bad = await api.put(f"/v1/storage-pools/{shared}", json={"capacity_gb": -1})
            assert bad.status_code == 422, bad.text
            put = await api.put(f"/v1/storage-pools/{shared}", json={"capacity_gb": 50, "tags": ["replicated"]})
            assert put.status_code == 200, put.text
            assert _pool_numbers(put.json()) == (50, ["replicated"], 0, 0, 2)

            replicated = {"size_gb": 30, "tags": ["replicated"]}
            # What-if: where two such VMs would go (the second finds the pool full), nothing claimed.
            vm_body = {"name": "w", "disk_gb": 1, "labels": {"suite": suite}, "volumes": [replicated]}
            simulated = await api.post("/v1/placement/simulate", json={"vms": [vm_body, vm_body]})
            assert simulated.status_code == 200, simulated.text
            one, two = simulated.json()["placements"]
            assert (one["volumes"], two["reason"]) == ([shared], "storage"), simulated.json()
            room = (await api.get("/v1/capacity", params={"cpu": 1, "memory_mb": 1024, "disk_gb": 1})).json()
            assert {"name": shared, "capacity_gb": 50, "allocated_gb": 0, "free_gb": 50} in room["storage_pools"]

            first = await _place(api, suite, "first", volumes=[replicated])
            assert first["status"] in PLACED, (first["status_reason"], first)
            assert first["volumes"] == [{**replicated, "pool": shared, "shared": True}]
            record = (await api.get(f"/v1/vms/{first['id']}/placement")).json()["decision"]
            assert record["volumes"] == [shared]
            assert _pool_numbers((await api.get(f"/v1/storage-pools/{shared}")).json())[2:4] == (30, 1)
            assert (await snapshot.shared_pools())[shared].allocated_gb == 30

            # 20 GB left on the shared pool, whichever host: counted once for both.
            second = await _place(api, suite, "second", volumes=[replicated])
            assert second["status"] == "unschedulable", second
            decision = (await api.get(f"/v1/vms/{second['id']}/placement")).json()["decision"]
            assert decision["reason"] == "storage", decision
            examples = {example["host"]: example["reason"] for example in decision["examples"]["storage"]}
            assert examples[shared_only] == (
                "storage: volume 1 (30 GB tagged replicated) fits no pool "
                f"({shared} shared 20 GB free of 50, replicated)"
            )

            # Redis loses everything: reconciliation writes the operator's pool again, with PostgreSQL's
            # allocation, and it still refuses what it must.
            await delete_keys(redis, servers.redis_key_prefix)
            await eventually(
                snapshot.shared_pools,
                lambda pools: pools.get(shared) == PoolRoom(shared, True, 50, 30, frozenset({"replicated"})),
                timeout=30,
                what="the shared pool restored by reconciliation",
            )
            again = await _place(api, suite, "again", volumes=[replicated])
            assert again["status"] == "unschedulable", again

            # The local pool, on the one host that has it; its space is that host's alone.
            fast = await _place(api, suite, "fast", volumes=[{"size_gb": 80, "tags": ["ssd"]}, {"size_gb": 5}])
            assert fast["status"] in PLACED, fast
            assert fast["hypervisor_id"] == with_local
            # First fit in name order: "local" comes before the shared pool's name, and has room for both.
            assert [v["pool"] for v in fast["volumes"]] == ["local", "local"]
            too_big = await _place(api, suite, "too-big", volumes=[{"size_gb": 30, "tags": ["ssd"]}])
            assert too_big["status"] == "unschedulable", too_big
            assert too_big["status_reason"].startswith("storage: "), too_big

            # Another flush: the host's hash comes back with its local pool's allocation from PostgreSQL,
            # and the restored claims give their volumes back when their VMs go.
            await delete_keys(redis, servers.redis_key_prefix)
            await eventually(
                lambda: _local_allocated(snapshot, with_local),
                lambda allocated: allocated == 85,
                timeout=30,
                what="the local pool's allocation restored",
            )
            await eventually(
                lambda: snapshot.shared_pools(),
                lambda pools: shared in pools and pools[shared].allocated_gb == 30,
                timeout=30,
                what="the shared pool restored",
            )
            again = await _place(api, suite, "too-big-again", volumes=[{"size_gb": 30, "tags": ["ssd"]}])
            assert again["status"] == "unschedulable", again

            refused = await api.delete(f"/v1/storage-pools/{shared}")
            assert refused.status_code == 409, refused.text
            assert first["id"] in refused.json()["detail"]
            for vm in (first, fast):
                await _delete(api, vm["id"])
            assert _pool_numbers((await api.get(f"/v1/storage-pools/{shared}")).json())[2:4] == (0, 0)
            await eventually(
                lambda: _local_allocated(snapshot, with_local),
                lambda allocated: allocated == 0,
                timeout=30,
                what="the local pool given back",
            )
            await eventually(
                snapshot.shared_pools, lambda pools: pools[shared].allocated_gb == 0, timeout=10, what="released"
            )
            gone = await api.delete(f"/v1/storage-pools/{shared}")
            assert gone.status_code == 204, gone.text
            assert (await api.get(f"/v1/storage-pools/{shared}")).status_code == 404
            assert shared not in await snapshot.shared_pools()
    finally:
        await redis.aclose()


async def test_a_migration_keeps_a_shared_volume_where_it_is_and_goes_only_to_a_host_that_reaches_its_pool(
    stack: Stack, servers: Servers
) -> None:
    suite = f"poolmove-{uuid.uuid4().hex[:6]}"
    shared, source, reaching, lacking = f"{suite}-nfs", f"{suite}-a", f"{suite}-b", f"{suite}-c"
    reach = [StoragePool(name=shared, kind=PoolKind.SHARED)]
    own = [StoragePool(name="local", kind=PoolKind.LOCAL, capacity_gb=500)]
    capacity = Resources(cpu=16, memory_mb=65536, disk_gb=100)
    hosts = [
        HostSpec(id=source, capacity=capacity, labels={"suite": suite}, storage_pools=reach),
        HostSpec(id=reaching, capacity=capacity, labels={"suite": suite}, storage_pools=reach),
        HostSpec(id=lacking, capacity=capacity, labels={"suite": suite}, storage_pools=own),
    ]
    fleet = await enrolled_fleet(servers, hosts, heartbeat_interval=1.0)
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    snapshot = Snapshot(redis, servers.redis_key_prefix)
    try:
        async with fleet, stack.async_client(timeout=30) as api:
            for host_id in (source, reaching, lacking):
                await eventually(
                    lambda host_id=host_id: api.get(f"/v1/hosts/{host_id}"),  # type: ignore[misc]
                    lambda r: r.status_code == 200 and r.json()["status"] == "online",
                    timeout=30,
                    what=f"{host_id} online",
                )
            assert (await api.put(f"/v1/storage-pools/{shared}", json={"capacity_gb": 40})).status_code == 200
            for host_id in (reaching, lacking):
                await api.patch(f"/v1/hosts/{host_id}", json={"scheduling_paused": True})
            vm = await running(api, {"name": f"{suite}-vm", "cpu": 1, "memory_mb": 1024, "disk_gb": 1,
                                     "labels": {"suite": suite}, "volumes": [{"size_gb": 30}]})  # fmt: skip
            assert vm["hypervisor_id"] == source
            assert vm["volumes"] == [{"size_gb": 30, "tags": [], "pool": shared, "shared": True}]
            for host_id in (reaching, lacking):
                await api.patch(f"/v1/hosts/{host_id}", json={"scheduling_paused": False})

            # Asked to go where its pool is not: the migration fails, and the VM stays where it runs.
            named = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": lacking})
            assert named.status_code == 202, named.text
            stayed = await settled(api, vm["id"])
            assert (stayed["status"], stayed["hypervisor_id"]) == ("running", source), stayed
            assert "storage" in (stayed["status_reason"] or ""), stayed
            moving = await api.post(f"/v1/vms/{vm['id']}/migrate", json={})
            assert moving.status_code == 202, moving.text
            moved = await settled(api, vm["id"])
            # The only host that reaches the pool; its 10 GB free did not matter: the volume stays.
            assert (moved["status"], moved["hypervisor_id"]) == ("running", reaching)
            assert moved["volumes"] == vm["volumes"]
            pool = (await api.get(f"/v1/storage-pools/{shared}")).json()
            assert (pool["allocated_gb"], pool["vms"]) == (30, 1)
            assert (await snapshot.shared_pools())[shared].allocated_gb == 30

            await _delete(api, vm["id"])
            assert (await api.get(f"/v1/storage-pools/{shared}")).json()["allocated_gb"] == 0
            await eventually(
                snapshot.shared_pools, lambda pools: pools[shared].allocated_gb == 0, timeout=10, what="released"
            )
            assert (await api.delete(f"/v1/storage-pools/{shared}")).status_code == 204
    finally:
        await redis.aclose()


async def test_a_vm_waiting_for_room_on_a_shared_pool_is_placed_once_a_volume_leaves_it(
    stack: Stack, servers: Servers
) -> None:
    suite = f"poolwait-{uuid.uuid4().hex[:6]}"
    shared, one, other = f"{suite}-nfs", f"{suite}-a", f"{suite}-b"
    reach = [StoragePool(name=shared, kind=PoolKind.SHARED)]
    capacity = Resources(cpu=16, memory_mb=65536, disk_gb=100)
    hosts = [HostSpec(id=h, capacity=capacity, labels={"suite": suite}, storage_pools=reach) for h in (one, other)]
    fleet = await enrolled_fleet(servers, hosts, heartbeat_interval=1.0)
    async with fleet, stack.async_client(timeout=30) as api:
        for host_id in (one, other):
            await eventually(
                lambda host_id=host_id: api.get(f"/v1/hosts/{host_id}"),  # type: ignore[misc]
                lambda r: r.status_code == 200 and r.json()["status"] == "online",
                timeout=30,
                what=f"{host_id} online",
            )
        assert (await api.put(f"/v1/storage-pools/{shared}", json={"capacity_gb": 40})).status_code == 200
        first = await _place(api, suite, "first", volumes=[{"size_gb": 30}])
        assert first["status"] in PLACED, first
        second = await _place(api, suite, "second", volumes=[{"size_gb": 30}], wait_s=120)
        assert second["status"] == "waiting", second
        assert second["status_reason"].startswith("storage: "), second
        await _delete(api, first["id"])
        placed = await eventually(
            lambda: api.get(f"/v1/vms/{second['id']}"),
            lambda r: r.json()["status"] in PLACED,
            timeout=30,
            what="the waiting VM placed once the pool had room",
        )
        assert placed.json()["volumes"][0]["pool"] == shared
        await _delete(api, second["id"])
        assert (await api.delete(f"/v1/storage-pools/{shared}")).status_code == 204


async def test_an_all_or_nothing_batch_counts_its_volumes_on_a_shared_pool_together(
    stack: Stack, servers: Servers
) -> None:
    suite = f"poolgang-{uuid.uuid4().hex[:6]}"
    shared, one, other = f"{suite}-nfs", f"{suite}-a", f"{suite}-b"
    reach = [StoragePool(name=shared, kind=PoolKind.SHARED)]
    capacity = Resources(cpu=16, memory_mb=65536, disk_gb=100)
    hosts = [HostSpec(id=h, capacity=capacity, labels={"suite": suite}, storage_pools=reach) for h in (one, other)]
    fleet = await enrolled_fleet(servers, hosts, heartbeat_interval=1.0)
    async with fleet, stack.async_client(timeout=30) as api:
        for host_id in (one, other):
            await eventually(
                lambda host_id=host_id: api.get(f"/v1/hosts/{host_id}"),  # type: ignore[misc]
                lambda r: r.status_code == 200 and r.json()["status"] == "online",
                timeout=30,
                what=f"{host_id} online",
            )

        async def gang(name: str) -> list[dict[str, Any]]:
            shape = {
                "cpu": 1,
                "memory_mb": 1024,
                "disk_gb": 1,
                "labels": {"suite": suite},
                "volumes": [{"size_gb": 30}],
            }
            vms = [{"name": f"{suite}-{name}-{n}", **shape} for n in range(2)]
            created = await api.post("/v1/vms/batch", json={"vms": vms, "all_or_nothing": True})
            assert created.status_code == 202, created.text
            decided = []
            for vm in created.json()["items"]:
                found = await eventually(
                    lambda vm=vm: api.get(f"/v1/vms/{vm['id']}"),  # type: ignore[misc]
                    lambda r: r.json()["status"] != "pending",
                    timeout=30,
                    what="decided",
                )
                decided.append(found.json())
            return decided

        assert (await api.put(f"/v1/storage-pools/{shared}", json={"capacity_gb": 50})).status_code == 200
        refused = await gang("small")
        assert [vm["status"] for vm in refused] == ["unschedulable", "unschedulable"], refused
        assert (await api.get(f"/v1/storage-pools/{shared}")).json()["allocated_gb"] == 0
        assert (await api.put(f"/v1/storage-pools/{shared}", json={"capacity_gb": 60})).status_code == 200
        placed = await gang("roomy")
        assert all(vm["status"] in PLACED for vm in placed), placed
        assert (await api.get(f"/v1/storage-pools/{shared}")).json()["allocated_gb"] == 60
        for vm in placed:
            await _delete(api, vm["id"])
        assert (await api.delete(f"/v1/storage-pools/{shared}")).status_code == 204


async def test_a_vm_asking_volumes_with_bad_sizes_or_a_reservation_is_refused_with_the_field(stack: Stack) -> None:
    async with stack.async_client(timeout=30) as api:
        zero = await api.post("/v1/vms", json={"name": "v", "disk_gb": 1, "volumes": [{"size_gb": 0}]})
        assert zero.status_code == 422, zero.text
        assert "size_gb" in zero.text
        reserved = await api.post(
            "/v1/vms",
            json={"name": "v", "disk_gb": 1, "volumes": [{"size_gb": 1}], "reservation": str(uuid.uuid4())},
        )
        assert reserved.status_code == 422, reserved.text
        assert "volumes" in reserved.text


async def _local_allocated(snapshot: Snapshot, host_id: str) -> int | None:
    host = (await snapshot.read_hosts([host_id]))[host_id]
    if host is None:
        return None
    return sum(pool.allocated_gb for pool in host.storage_pools if not pool.shared)


def _pool_numbers(pool: dict[str, Any]) -> tuple[int, list[str], int, int, int]:
    return pool["capacity_gb"], pool["tags"], pool["allocated_gb"], pool["vms"], pool["hosts"]


async def _place(api: httpx.AsyncClient, suite: str, name: str, **asked: Any) -> dict[str, Any]:
    body = {"name": f"{suite}-{name}", "cpu": 1, "memory_mb": 1024, "disk_gb": 1, "labels": {"suite": suite}, **asked}
    created = await api.post("/v1/vms", json=body)
    assert created.status_code == 202, created.text
    found = await eventually(
        lambda: api.get(f"/v1/vms/{created.json()['id']}"),
        lambda r: r.json()["status"] != "pending",
        timeout=30,
        what=f"{name} decided",
    )
    vm: dict[str, Any] = found.json()
    return vm


async def _delete(api: httpx.AsyncClient, vm_id: str) -> None:
    assert (await api.delete(f"/v1/vms/{vm_id}")).status_code == 202
    await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] == "deleted",
        timeout=30,
        what=f"{vm_id} deleted",
    )
