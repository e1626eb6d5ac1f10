"""The operator owns the inventory, on the real PostgreSQL and Redis: what ``PATCH /v1/hosts/{id}``
sets wins over every later heartbeat and comes back after a Redis flush; PostgreSQL's guard uses it;
a host deleted under a placement refuses it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.rows import delete_keys, insert_vm
from tests.servers import Servers
from vmsched_api.repository import HostRemoval, Repository
from vmsched_contract.api import HostPatch
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import AgentHeartbeat, Overcommit, Resources, Taint, TaintEffect
from vmsched_contract.strategy import Strategy
from vmsched_gateway.heartbeats import HeartbeatFold
from vmsched_gateway.host_store import HostStore
from vmsched_redis.host_hash import SnapshotHost
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.ledger import PostgresLedger
from vmsched_scheduler.ports import Committed, Placement

CAPACITY = Resources(cpu=8, memory_mb=16384, disk_gb=100)
GPU_TAINT = Taint(key="gpu", value="true", effect=TaintEffect.NO_SCHEDULE)


class DeclaredQueues:
    def __init__(self, blocked: asyncio.Event | None = None) -> None:
        self.declared_again: list[str] = []
        self.declared: list[str] = []
        self.blocked = blocked  # set: declarations go through; unset: each waits (a slow broker)

    def known(self, host_id: str) -> bool:
        return host_id in self.declared

    async def ensure_many(self, hosts: Mapping[str, bool]) -> None:
        if self.blocked is not None:
            await self.blocked.wait()
        for host_id, again in hosts.items():
            self.declared.append(host_id)
            if again:
                self.declared_again.append(host_id)


class NoOrphans:
    async def found(self, host_id: str, vm: object) -> None:
        raise AssertionError(f"no VM runs anywhere in this test, yet {host_id} reported one")


@pytest.fixture
async def snapshot(servers: Servers) -> AsyncIterator[Snapshot]:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    prefix = f"{servers.redis_key_prefix}-inventory-{uuid.uuid4().hex[:6]}"
    try:
        yield Snapshot(redis, prefix)
    finally:
        await delete_keys(redis, prefix)
        await redis.aclose()


def _fold(engine: AsyncEngine, snapshot: Snapshot, queues: DeclaredQueues | None = None) -> HeartbeatFold:
    anything: Any = None
    return HeartbeatFold(
        store=HostStore(engine),
        snapshot=snapshot,
        queues=queues or DeclaredQueues(),
        orphans=NoOrphans(),  # type: ignore[arg-type]
        publisher=anything,
        offline_timeout=15.0,
    )


def _agent_beat(host_id: str) -> AgentHeartbeat:
    """What the agent says of itself, every time: its own labels, taints and ratios."""
    return AgentHeartbeat(
        agent_id=host_id,
        capacity=CAPACITY,
        labels={"zone": "z1", "rack": "r1"},
        taints=[Taint(key="agent", value="says", effect=TaintEffect.PREFER_NO_SCHEDULE)],
        overcommit=Overcommit(cpu=1.5, memory=1.0, disk=1.0),
    )


async def _snapshot_host(snapshot: Snapshot, host_id: str) -> SnapshotHost:
    host = (await snapshot.read_hosts([host_id]))[host_id]
    assert host is not None
    return host


async def test_the_operators_word_wins_over_every_heartbeat_and_a_redis_flush(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    fold, repository = _fold(private_engine, snapshot), Repository(private_engine)
    await fold.on_heartbeat(_agent_beat("hv-i1"))
    await fold.drain()
    patch = HostPatch.model_validate(
        {
            "labels": {"zone": "z9", "tier": "gold"},
            "taints": [GPU_TAINT.model_dump()],
            "overcommit": {"cpu": 4.0},
            "reserved": {"cpu": 2, "memory_mb": 1024},
        }
    )
    patched = await repository.patch_host("hv-i1", patch)
    assert patched is not None
    assert patched.labels == {"zone": "z9", "rack": "r1", "tier": "gold"}
    assert patched.operator_labels == {"zone": "z9", "tier": "gold"}
    assert patched.taints == (GPU_TAINT,) == patched.operator_taints
    assert (patched.overcommit.cpu, patched.overcommit.memory) == (4.0, 1.0)
    assert patched.operator_overcommit.cpu == 4.0
    assert patched.operator_overcommit.memory is None
    assert (patched.reserved.cpu, patched.reserved.memory_mb, patched.reserved.disk_gb) == (2, 1024, 0)

    # The agent goes on saying what it always says (a restart says the same): the operator's word stays.
    for _ in range(2):
        await fold.on_heartbeat(_agent_beat("hv-i1"))
        await fold.drain()
    host = await repository.get_host("hv-i1")
    assert host is not None
    assert host.labels == patched.labels
    assert host.taints == (GPU_TAINT,)
    assert host.overcommit.cpu == 4.0
    assert host.reserved.cpu == 2
    seen = await _snapshot_host(snapshot, "hv-i1")
    assert dict(seen.labels) == patched.labels
    assert seen.taints == (GPU_TAINT,)
    assert seen.overcommit.cpu == 4.0
    assert seen.reserved == patched.reserved

    # Redis loses everything; the next heartbeat brings the host back as PostgreSQL has it.
    await delete_keys(snapshot.redis, snapshot.prefix)
    await fold.on_heartbeat(_agent_beat("hv-i1"))
    await fold.drain()
    seen = await _snapshot_host(snapshot, "hv-i1")
    assert dict(seen.labels) == patched.labels
    assert seen.taints == (GPU_TAINT,)
    assert seen.overcommit.cpu == 4.0
    assert seen.reserved == patched.reserved

    # Withdrawn, the agent's values apply again.
    withdrawn = await repository.patch_host(
        "hv-i1",
        HostPatch.model_validate({"labels": {"zone": None, "tier": None}, "taints": None, "overcommit": {"cpu": None}}),
    )
    assert withdrawn is not None
    assert withdrawn.labels == {"zone": "z1", "rack": "r1"}
    assert withdrawn.operator_labels == {}
    assert withdrawn.taints == (_agent_beat("hv-i1").taints[0],)
    assert withdrawn.operator_taints is None
    assert withdrawn.overcommit.cpu == 1.5
    assert withdrawn.reserved.cpu == 2

    # An empty list is an answer too: no taints, whatever the agent says.
    untainted = await repository.patch_host("hv-i1", HostPatch.model_validate({"taints": []}))
    assert untainted is not None
    assert untainted.taints == ()
    assert untainted.operator_taints == ()


async def test_postgres_guard_uses_the_operators_ratio_and_reserved(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    fold, repository = _fold(private_engine, snapshot), Repository(private_engine)
    await fold.on_heartbeat(AgentHeartbeat(agent_id="hv-i2", capacity=CAPACITY))
    await fold.drain()
    ledger = PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED)
    six_cpus = Resources(cpu=6, memory_mb=1, disk_gb=0)

    async def settle(host_id: str) -> Committed:
        vm_id = await insert_vm(private_engine, status="pending", resources=six_cpus)
        placement = Placement(vm_id, 1, host_id, six_cpus, Strategy.LEAST_LOADED, _record(host_id))
        (result,) = (await ledger.settle([placement], [])).placements
        return result.outcome

    # 8 cpus, 4 reserved: 4 left, and the guard refuses 6 even if a stale snapshot allowed it.
    await repository.patch_host("hv-i2", HostPatch.model_validate({"reserved": {"cpu": 4}}))
    assert await settle("hv-i2") is Committed.HOST_REFUSED
    # (8 - 4) x 2 = 8: room for 6.
    await repository.patch_host("hv-i2", HostPatch.model_validate({"overcommit": {"cpu": 2.0}}))
    assert await settle("hv-i2") is Committed.PLACED


async def test_a_host_with_vms_on_it_is_not_deleted_and_a_placement_on_a_deleted_host_is_refused(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    queues = DeclaredQueues()
    fold, repository = _fold(private_engine, snapshot, queues), Repository(private_engine)
    for host_id in ("hv-i3", "hv-i4"):
        await fold.on_heartbeat(AgentHeartbeat(agent_id=host_id, capacity=CAPACITY))
    await fold.drain()
    running = await insert_vm(private_engine, status="running", host="hv-i3")
    await insert_vm(private_engine, status="failed", host="hv-i4")  # holds nothing there
    assert await repository.delete_host("hv-i3") == (HostRemoval.OCCUPIED, [running])
    assert await repository.delete_host("nope") == (HostRemoval.UNKNOWN, [])
    assert await repository.delete_host("hv-i4") == (HostRemoval.DELETED, [])
    assert await repository.get_host("hv-i4") is None

    # A scheduler that decided on the host before it went: PostgreSQL refuses the placement.
    ledger = PostgresLedger(private_engine, default_strategy=Strategy.LEAST_LOADED)
    small = Resources(cpu=1, memory_mb=1, disk_gb=0)
    vm_id = await insert_vm(private_engine, status="pending", resources=small)
    placement = Placement(vm_id, 1, "hv-i4", small, Strategy.LEAST_LOADED, _record("hv-i4"))
    (result,) = (await ledger.settle([placement], [])).placements
    assert result.outcome is Committed.HOST_REFUSED

    # Its snapshot entry goes, named on the change feed so schedulers drop it from their copies.
    seq = await snapshot.current_seq()
    await snapshot.forget_host("hv-i4")
    assert (await snapshot.read_hosts(["hv-i4"]))["hv-i4"] is None
    assert "hv-i4" not in await snapshot.host_ids()
    assert "hv-i4" in (await snapshot.changed_since(seq))[1]

    # Its agent heartbeats again: a new host, whose queue the gateway declares again.
    await fold.on_heartbeat(AgentHeartbeat(agent_id="hv-i4", capacity=CAPACITY))
    await fold.drain()
    assert await repository.get_host("hv-i4") is not None
    assert queues.declared_again == ["hv-i3", "hv-i4", "hv-i4"]


async def test_heartbeats_are_folded_while_the_hosts_queues_are_still_being_declared(
    private_engine: AsyncEngine, snapshot: Snapshot
) -> None:
    # A gateway that starts declares every host's command queue once; with a slow broker, folding
    # waited for every declaration, and hosts whose heartbeats queued behind went offline.
    declarations = asyncio.Event()
    queues = DeclaredQueues(blocked=declarations)
    fold = _fold(private_engine, snapshot, queues)
    hosts = [f"hv-q{n}" for n in range(5)]
    async with asyncio.timeout(10):
        await asyncio.gather(*(fold.on_heartbeat(AgentHeartbeat(agent_id=h, capacity=CAPACITY)) for h in hosts))
    assert all(host is not None for host in (await snapshot.read_hosts(hosts)).values())
    assert queues.declared == []  # none declared yet, and no heartbeat waited for one
    declarations.set()
    await fold.drain()
    assert sorted(queues.declared) == hosts


def _record(host_id: str) -> PlacementRecord:
    return PlacementRecord(
        strategy=Strategy.LEAST_LOADED,
        host=host_id,
        considered=1,
        eligible=1,
        decided_at="2026-01-01T00:00:00Z",
        decision_us=1.0,
    )
