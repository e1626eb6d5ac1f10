"""Named extra resources end to end on the real servers.

Through the API: a host whose agent advertises ``{"fpga": 2}`` takes two VMs asking ``{"fpga": 1}``,
the third is unschedulable with reason ``extra`` naming fpga and the numbers, deleting one frees
room, and after a Redis flush the snapshot rebuilt from PostgreSQL (heartbeats and reconciliation)
accounts exactly what PostgreSQL does, and refuses what it must. Then, each on stores of its own:
PostgreSQL's guard (a round of placements on one host counts its VMs together), reconciliation
(claims and allocations of extras rebuilt from the VMs' rows) and an all-or-nothing Redis claim (its
VMs on one host count together).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.stack import Stack
from tests.faults.invariants import check
from tests.fleets import enrolled_fleet
from tests.integration.rows import delete_keys, host_row, insert_vm, online_host
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Resources
from vmsched_contract.strategy import Strategy
from vmsched_domain.vm_changes import agent_deleted, delete_requested
from vmsched_pg import vm_writes
from vmsched_pg.rows import vm_from_row
from vmsched_redis.claims import Claim
from vmsched_redis.host_hash import SnapshotHost
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.ledger import PostgresLedger
from vmsched_scheduler.ports import Committed, Placement
from vmsched_scheduler.reconcile import reconcile

FPGA = {"fpga": 1}
PLACED = ("scheduled", "running")
NO_ROOM_ON_THE_FPGA_HOST = "extra: needs 1 fpga, 0 fpga free (2 fpga total, 2 fpga allocated)"
NONE_ON_THE_PLAIN_HOST = "extra: needs 1 fpga, 0 fpga free (0 fpga total, 0 fpga allocated)"


async def test_a_host_with_two_fpgas_takes_two_vms_asking_one_and_its_accounting_survives_a_redis_flush(
    stack: Stack, servers: Servers
) -> None:
    suite = f"extra-{uuid.uuid4().hex[:6]}"
    fpga_host, plain_host = f"{suite}-a", f"{suite}-b"
    hosts = [
        HostSpec(
            id=fpga_host,
            capacity=Resources(cpu=16, memory_mb=65536, disk_gb=100, extra={"fpga": 2}),
            labels={"suite": suite},
        ),
        HostSpec(id=plain_host, capacity=Resources(cpu=16, memory_mb=65536, disk_gb=100), labels={"suite": suite}),
    ]
    fleet = await enrolled_fleet(servers, hosts, heartbeat_interval=1.0)
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    snapshot = Snapshot(redis, servers.redis_key_prefix)
    placed: list[str] = []  # those holding an fpga now
    asked: list[str] = []  # every VM this test asked for

    async def place(name: str) -> dict[str, Any]:
        vm = await _place(api, suite, name, extra=FPGA)
        asked.append(vm["id"])
        return vm

    try:
        async with fleet, stack.async_client(timeout=30) as api:
            for host_id in (fpga_host, plain_host):
                await eventually(
                    lambda host_id=host_id: api.get(f"/v1/hosts/{host_id}"),  # type: ignore[misc]
                    lambda r: r.status_code == 200 and r.json()["status"] == "online",
                    timeout=30,
                    what=f"{host_id} online",
                )
            assert (await api.get(f"/v1/hosts/{fpga_host}")).json()["capacity"]["extra"] == {"fpga": 2}
            assert "extra" not in (await api.get(f"/v1/hosts/{plain_host}")).json()["capacity"]

            for name in ("one", "two"):
                vm = await place(name)
                assert vm["status"] in PLACED, vm
                assert (vm["hypervisor_id"], vm["extra"]) == (fpga_host, FPGA)
                placed.append(vm["id"])
            await _agree(api, snapshot, fpga_host, {"fpga": 2})
            # The agent is told what the VM asked for, extras included.
            await eventually(
                _async(lambda: [c.resources.extra for c in fleet.received(fpga_host)]),
                lambda seen: seen == [FPGA, FPGA],
                timeout=30,
                what="both creates carried out",
            )

            third = await place("three")
            assert third["status"] == "unschedulable", third
            # (hosts of earlier tests, offline by now, may be counted too)
            assert third["status_reason"].startswith("extra: none of "), third
            assert third["status_reason"].endswith("extra: 2)"), third
            decision = (await api.get(f"/v1/vms/{third['id']}/placement")).json()["decision"]
            assert (decision["reason"], decision["rejections"]["extra"]) == ("extra", 2)
            assert {example["host"]: example["reason"] for example in decision["examples"]["extra"]} == {
                fpga_host: NO_ROOM_ON_THE_FPGA_HOST,
                plain_host: NONE_ON_THE_PLAIN_HOST,
            }

            # Deleting one gives its fpga back, in PostgreSQL and in the snapshot.
            await _delete(api, placed.pop(0))
            await _agree(api, snapshot, fpga_host, {"fpga": 1})

            # Redis loses everything: heartbeats bring the hosts back with PostgreSQL's allocations,
            # reconciliation the claims; the accounting is PostgreSQL's again, and holds.
            await delete_keys(redis, servers.redis_key_prefix)
            await eventually(
                lambda: snapshot.claim_of(uuid.UUID(placed[0])),
                lambda host: host == fpga_host,
                timeout=30,
                what="the remaining VM's claim restored by reconciliation",
            )
            await _agree(api, snapshot, fpga_host, {"fpga": 1})
            fourth = await place("four")
            assert fourth["status"] in PLACED, fourth
            assert fourth["hypervisor_id"] == fpga_host
            placed.append(fourth["id"])
            await _agree(api, snapshot, fpga_host, {"fpga": 2})
            fifth = await place("five")
            assert fifth["status"] == "unschedulable", fifth
            assert fifth["status_reason"].startswith("extra: ")

            while placed:
                await _delete(api, placed.pop())
            await _agree(api, snapshot, fpga_host, {})
            report = await check(servers.asyncpg_dsn, asked)
            # Hosts of other tests share this database: this test answers for its own.
            assert [problem for problem in report.problems if suite in problem] == []
            assert report.vms == len(asked)
            assert report.by_status == {"deleted": 3, "unschedulable": 2}
    finally:
        await redis.aclose()


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


async def _agree(api: httpx.AsyncClient, snapshot: Snapshot, host_id: str, extra: dict[str, int]) -> None:
    """PostgreSQL holds ``extra`` allocated on the host, and the snapshot (synced) holds what
    PostgreSQL holds of every resource."""

    async def both() -> tuple[dict[str, Any], SnapshotHost | None]:
        return (await api.get(f"/v1/hosts/{host_id}")).json(), (await snapshot.read_hosts([host_id]))[host_id]

    def agreeing(seen: tuple[dict[str, Any], SnapshotHost | None]) -> bool:
        row, cached = seen
        return (
            row["allocated"].get("extra", {}) == extra
            and cached is not None
            and cached.synced
            and cached.allocated == Resources.model_validate(row["allocated"])
            and cached.vm_count == row["vm_count"]
        )

    await eventually(both, agreeing, timeout=30, what=f"{host_id}: {extra} allocated in PostgreSQL and Redis")


def _async(probe: Any) -> Any:
    async def call() -> Any:
        return probe()

    return call


# -- PostgreSQL's guard and reconciliation, each on a database of its own ------------------------------


@pytest.fixture
async def snapshot(servers: Servers) -> AsyncIterator[Snapshot]:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    prefix = f"{servers.redis_key_prefix}-extra-{uuid.uuid4().hex[:6]}"
    try:
        yield Snapshot(redis, prefix)
    finally:
        await delete_keys(redis, prefix)
        await redis.aclose()


async def _insert_host(engine: AsyncEngine, host_id: str, extra: dict[str, int]) -> None:
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, extra) "
                "VALUES (:id, 'online', 64, 262144, 1000, CAST(:extra AS jsonb))"
            ),
            {"id": host_id, "extra": json.dumps(extra)},
        )


async def _insert_vm(
    engine: AsyncEngine, extra: dict[str, int], *, status: str = "pending", host: str | None = None
) -> uuid.UUID:
    return await insert_vm(
        engine, status=status, host=host, name="x", resources=Resources(cpu=1, memory_mb=512, disk_gb=1, extra=extra)
    )


async def test_postgresqls_guard_counts_a_rounds_vms_together_and_a_release_gives_their_extras_back(
    private_engine: AsyncEngine,
) -> None:
    await _insert_host(private_engine, "hv-x1", {"fpga": 2, "nic": 1})
    asks = [{"fpga": 1}, {"nic": 1}, {"fpga": 1, "nic": 1}, {"fpga": 1}, {}]
    vm_ids = [await _insert_vm(private_engine, ask) for ask in asks]
    record = PlacementRecord(
        strategy=Strategy.BEST_FIT,
        host="hv-x1",
        considered=1,
        eligible=1,
        decided_at="2026-01-01T00:00:00Z",
        decision_us=1.0,
    )
    placements = [
        Placement(vm_id, 1, "hv-x1", Resources(cpu=1, memory_mb=512, disk_gb=1, extra=ask), Strategy.BEST_FIT, record)
        for vm_id, ask in zip(vm_ids, asks, strict=True)
    ]

    settled = await PostgresLedger(private_engine, default_strategy=Strategy.BEST_FIT).settle(placements, [])

    # The third would take a second nic: refused, and with it every placement on the host after it
    # (the guard keeps the prefix of a host's placements that fits).
    outcomes = [result.outcome for result in settled.placements]
    assert outcomes == [Committed.PLACED, Committed.PLACED] + [Committed.HOST_REFUSED] * 3
    host = await host_row(private_engine, "hv-x1")
    assert (host.allocated.extra, host.vm_count) == ({"fpga": 1, "nic": 1}, 2)

    # The first is deleted (asked, then done by its agent): its fpga goes back, the nic stays with the second.
    for step in ("asked", "done"):
        async with private_engine.begin() as connection:
            (row,) = (await connection.execute(vm_writes.LOCK_VMS, {"ids": vm_ids[:1]})).all()
            vm = vm_from_row(row)
            change = delete_requested(vm) if step == "asked" else agent_deleted(vm, "hv-x1", time.time())
            assert change is not None
            assert await vm_writes.apply(connection, [change]) == [change]
        held = (await host_row(private_engine, "hv-x1")).allocated.extra
        assert held == ({"fpga": 1, "nic": 1} if step == "asked" else {"nic": 1})  # deleting still holds it
    host = await host_row(private_engine, "hv-x1")
    assert (host.allocated.extra, host.vm_count) == ({"nic": 1}, 1)


async def test_reconciliation_rebuilds_extras_from_the_vms_rows(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    await _insert_host(private_engine, "hv-x2", {"fpga": 4})
    committed = [await _insert_vm(private_engine, {"fpga": n}, status="running", host="hv-x2") for n in (1, 2)]
    async with private_engine.begin() as connection:  # a drifted row: the VMs are the truth
        await connection.execute(text("""UPDATE hosts SET alloc_extra = '{"fpga": 9, "nic": 1}' WHERE id = 'hv-x2'"""))
    # Known to Redis from a heartbeat that brought the drifted allocations; its claims gone, as after a flush.
    await snapshot.record_heartbeats(
        [
            online_host(
                "hv-x2",
                Resources(cpu=64, memory_mb=262144, disk_gb=1000, extra={"fpga": 4}),
                allocated=Resources(cpu=0, memory_mb=0, disk_gb=0, extra={"fpga": 9, "nic": 1}),
            )
        ],
        bump_interval=5.0,
    )
    one_fpga = Resources(cpu=1, memory_mb=1, disk_gb=1, extra={"fpga": 1})
    assert (await snapshot.claim(uuid.uuid4(), "hv-x2", one_fpga, time.time() - 120)).outcome == "insufficient"

    await reconcile(private_engine, snapshot)

    assert (await host_row(private_engine, "hv-x2")).allocated.extra == {"fpga": 3}
    assert (await _cached(snapshot, "hv-x2")).allocated.extra == {"fpga": 3}
    assert {await snapshot.claim_of(vm_id) for vm_id in committed} == {"hv-x2"}

    # A claim in flight (a scheduler between claim and commit) is kept by the next pass, with its fpga.
    in_flight = uuid.uuid4()
    assert (await snapshot.claim(in_flight, "hv-x2", one_fpga, time.time())).holds
    assert (await snapshot.claim(uuid.uuid4(), "hv-x2", one_fpga, time.time())).outcome == "insufficient"
    report = await reconcile(private_engine, snapshot)
    assert report.in_flight_claims == 1
    assert (await _cached(snapshot, "hv-x2")).allocated.extra == {"fpga": 4}

    # Releasing the restored claims gives back what PostgreSQL says those VMs hold.
    await snapshot.release_many([*committed, in_flight])
    assert (await _cached(snapshot, "hv-x2")).allocated.extra == {}


async def _cached(snapshot: Snapshot, host_id: str) -> SnapshotHost:
    host = (await snapshot.read_hosts([host_id]))[host_id]
    assert host is not None
    return host


async def test_an_all_or_nothing_claim_counts_its_vms_extras_on_one_host_together(snapshot: Snapshot) -> None:
    capacity = Resources(cpu=64, memory_mb=262144, disk_gb=1000, extra={"fpga": 3})
    await snapshot.record_heartbeats([online_host("hv-x3", capacity)], bump_interval=5.0)
    two = Resources(cpu=1, memory_mb=1, disk_gb=1, extra={"fpga": 2})
    gang = [Claim(uuid.uuid4(), "hv-x3", two), Claim(uuid.uuid4(), "hv-x3", two)]

    refused = await snapshot.claim_many(gang, time.time(), all_or_nothing=True)

    # Each fits alone; together they would take 4 of 3: neither is reserved.
    assert [(r.outcome, r.detail) for r in refused.results] == [("gang", ""), ("insufficient", "extra")]
    assert (await _cached(snapshot, "hv-x3")).allocated.extra == {}
    one = Resources(cpu=1, memory_mb=1, disk_gb=1, extra={"fpga": 1})
    claimed = await snapshot.claim_many([gang[0], Claim(uuid.uuid4(), "hv-x3", one)], time.time(), all_or_nothing=True)
    assert [r.outcome for r in claimed.results] == ["claimed", "claimed"]
    assert (await _cached(snapshot, "hv-x3")).allocated.extra == {"fpga": 3}
