"""The storage pool rule three ways: Python (vmsched_domain.storage.refusal), the Redis claim (Lua
rendered from the rule, with the host's local pools and the shared pools' hash) and PostgreSQL's guard
(SQL rendered from the rule, under the pools' locks, summing vm_volumes). Hypothesis throws random
pools and claims at all three, on the real servers, and demands the same answer (Redis: down to the
words of the refusal); a claim must book exactly what it takes, and its release give it all back.
The engine's first fit is proven equal to Python's in tests/placement/test_storage.py.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from tests.integration.stores import Stores, module_stores
from tests.servers import Servers
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Overcommit, Resources
from vmsched_contract.storage import PoolKind, StoragePool
from vmsched_contract.strategy import Strategy
from vmsched_domain.storage import PoolRoom, PoolTake, VolumePlacement, refusal
from vmsched_redis.claims import Claim
from vmsched_redis.host_hash import HostWrite
from vmsched_redis.storage_pools import pools_json, put_shared_pool, shared_pools_key
from vmsched_scheduler.ports import Committed, Placement

ROOMY = Resources(cpu=64, memory_mb=65536, disk_gb=1000)
SMALL = Resources(cpu=1, memory_mb=512, disk_gb=1)
TAGS = st.frozensets(st.sampled_from(["ssd", "hdd", "fast"]), max_size=2)
GB = st.integers(0, 40)


@pytest.fixture(scope="module")
def stores(servers: Servers) -> Iterator[Stores]:
    with module_stores(servers, "storage") as opened:
        yield opened


@dataclass(frozen=True)
class Shared:
    name: str
    capacity: int | None  # None: the operator never set it (no room)
    allocated: int
    tags: frozenset[str]


@dataclass(frozen=True)
class Case:
    local: tuple[PoolRoom, ...]
    shared: tuple[Shared, ...]  # each reached by the host
    takes: tuple[PoolTake, ...]  # sorted by name, as a claim carries them


@st.composite
def cases(draw: st.DrawFn) -> Case:
    run = uuid.uuid4().hex[:6]
    local = tuple(
        PoolRoom(name, False, capacity, draw(st.integers(0, capacity + 5)), draw(TAGS))
        for name in draw(st.lists(st.sampled_from(["l1", "l2"]), unique=True, max_size=2))
        for capacity in [draw(GB)]
    )
    shared = tuple(
        Shared(f"s{n}-{run}", capacity, draw(st.integers(0, (capacity or 0) + 5)), draw(TAGS))
        for n in draw(st.lists(st.sampled_from([1, 2]), unique=True, max_size=2))
        for capacity in [draw(st.one_of(st.none(), GB))]
    )
    names = [p.name for p in local] + [s.name for s in shared] + [f"elsewhere-{run}"]
    chosen = draw(st.lists(st.sampled_from(names), unique=True, min_size=1, max_size=3))
    takes = tuple(PoolTake(name, draw(st.integers(1, 30)), draw(TAGS)) for name in sorted(chosen))
    return Case(local, shared, takes)


def in_python(case: Case) -> str | None:
    pools = {p.name: p for p in case.local}
    for s in case.shared:
        pools[s.name] = PoolRoom(
            s.name, True, s.capacity or 0, s.allocated, s.tags if s.capacity is not None else frozenset()
        )
    return refusal({t.name: t.gb for t in case.takes}, pools, {t.name: t.tags for t in case.takes})


def heartbeat_pools(case: Case) -> list[StoragePool]:
    local = [
        StoragePool(name=p.name, kind=PoolKind.LOCAL, capacity_gb=p.capacity_gb, tags=sorted(p.tags))
        for p in case.local
    ]
    return local + [StoragePool(name=s.name, kind=PoolKind.SHARED) for s in case.shared]


async def in_redis(stores: Stores, case: Case) -> str | None:
    """What the claim says; what it books and what its release gives back."""
    snapshot = stores.snapshot
    host_id = f"hv-{uuid.uuid4().hex[:8]}"
    local_used = {p.name: p.allocated_gb for p in case.local if p.allocated_gb}
    write = HostWrite(host_id, ROOMY, Overcommit(), Resources(cpu=0, memory_mb=0, disk_gb=0), {}, "online",
                      time.time(), False, Resources(cpu=0, memory_mb=0, disk_gb=0), 0,
                      storage_pools=heartbeat_pools(case), pools_allocated=local_used)  # fmt: skip
    await snapshot.record_heartbeats([write], bump_interval=60.0)
    for s in case.shared:
        if s.capacity is not None:
            await put_shared_pool(stores.redis, snapshot.prefix, s.name, s.capacity, sorted(s.tags))
        await stores.redis.hset(shared_pools_key(snapshot.prefix), f"a:{s.name}", str(s.allocated))

    async def numbers() -> dict[str, int]:
        host = (await snapshot.read_hosts([host_id]))[host_id]
        assert host is not None
        seen = {p.name: p.allocated_gb for p in host.storage_pools if not p.shared}
        shared = await snapshot.shared_pools()
        raw = await stores.redis.hgetall(shared_pools_key(snapshot.prefix))
        for s in case.shared:
            seen[s.name] = shared[s.name].allocated_gb if s.name in shared else int(raw[f"a:{s.name}"])
        return seen

    before = await numbers()
    vm_id = uuid.uuid4()
    (result,) = (await snapshot.claim_many([Claim(vm_id, host_id, SMALL, pools=case.takes)], time.time())).results
    claimed = await numbers()
    await snapshot.release(vm_id)
    released = await numbers()
    await snapshot.forget_host(host_id)
    assert result.outcome in ("claimed", "storage"), result
    taken = {t.name: t.gb for t in case.takes} if result.outcome == "claimed" else {}
    assert claimed == {name: gb + taken.get(name, 0) for name, gb in before.items()}
    assert released == before
    return None if result.outcome == "claimed" else result.detail


async def in_postgresql(stores: Stores, case: Case) -> Committed:
    """What the guard says, with the pools' allocations made of a running VM's volumes."""
    host_id, filler, vm_id = f"hv-{uuid.uuid4().hex[:8]}", uuid.uuid4(), uuid.uuid4()
    async with stores.engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, storage_pools) "
                "VALUES (:id, 'online', 64, 65536, 1000, CAST(:pools AS jsonb))"
            ),
            {"id": host_id, "pools": pools_json(heartbeat_pools(case))},
        )
        for s in case.shared:
            if s.capacity is not None:
                await connection.execute(
                    text("INSERT INTO storage_pools (name, capacity_gb, tags) VALUES (:n, :c, CAST(:t AS jsonb))"),
                    {"n": s.name, "c": s.capacity, "t": json.dumps(sorted(s.tags))},
                )
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb) "
                "VALUES (:filler, 'filler', 'running', :host, 0, 0, 0), (:vm, 'pool', 'pending', NULL, 1, 512, 1)"
            ),
            {"filler": filler, "vm": vm_id, "host": host_id},
        )
        held = [(p.name, False, p.allocated_gb) for p in case.local] + [
            (s.name, True, s.allocated) for s in case.shared
        ]
        for name, shared, gb in held:
            if gb:
                await connection.execute(
                    text("INSERT INTO vm_volumes (vm_id, pool, shared, size_gb) VALUES (:vm, :pool, :shared, :gb)"),
                    {"vm": filler, "pool": name, "shared": shared, "gb": gb},
                )
    record = PlacementRecord(strategy=Strategy.BEST_FIT, host=host_id, considered=1, eligible=1,
                             decided_at="2026-01-01T00:00:00Z", decision_us=1.0)  # fmt: skip
    storage = VolumePlacement(tuple(t.name for t in case.takes), case.takes)
    placement = Placement(vm_id, 1, host_id, SMALL, Strategy.BEST_FIT, record, storage=storage)
    settled = await stores.ledger.settle([placement], [])
    outcome = settled.placements[0].outcome
    async with stores.engine.begin() as connection:
        recorded = (
            await connection.execute(text("SELECT pool, size_gb FROM vm_volumes WHERE vm_id = :id"), {"id": vm_id})
        ).all()
        assert dict(recorded) == ({t.name: t.gb for t in case.takes} if outcome is Committed.PLACED else {})
        await connection.execute(text("DELETE FROM vms WHERE id = ANY(:ids)"), {"ids": [vm_id, filler]})
        await connection.execute(text("DELETE FROM hosts WHERE id = :id"), {"id": host_id})
        await connection.execute(
            text("DELETE FROM storage_pools WHERE name = ANY(:names)"), {"names": [s.name for s in case.shared]}
        )
    return outcome


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_python_redis_and_postgresql_agree_on_every_pool_claim(stores: Stores, case: Case) -> None:
    expected = in_python(case)
    assert stores.loop.run(in_redis(stores, case)) == expected
    assert stores.loop.run(in_postgresql(stores, case)) is (
        Committed.PLACED if expected is None else Committed.HOST_REFUSED
    )


def test_a_shared_pool_the_operator_never_set_has_no_room() -> None:
    case = Case((), (Shared("s1", None, 0, frozenset()),), (PoolTake("s1", 1),))
    assert in_python(case) == "storage: pool s1 needs 1 GB, 0 GB free"


def test_an_all_or_nothing_claim_counts_its_vms_volumes_on_one_shared_pool_together(stores: Stores) -> None:
    async def claim_two(capacity: int) -> list[str]:
        snapshot, pool = stores.snapshot, f"gang-{uuid.uuid4().hex[:6]}"
        hosts = [f"hv-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        zero = Resources(cpu=0, memory_mb=0, disk_gb=0)
        writes = [
            HostWrite(
                host,
                ROOMY,
                Overcommit(),
                zero,
                {},
                "online",
                time.time(),
                False,
                zero,
                0,
                storage_pools=[StoragePool(name=pool, kind=PoolKind.SHARED)],
            )
            for host in hosts
        ]
        await snapshot.record_heartbeats(writes, bump_interval=60.0)
        await put_shared_pool(stores.redis, snapshot.prefix, pool, capacity, [])
        claims = [Claim(uuid.uuid4(), host, SMALL, pools=(PoolTake(pool, 30),)) for host in hosts]
        claimed = await snapshot.claim_many(claims, time.time(), all_or_nothing=True)
        taken = (await snapshot.shared_pools())[pool].allocated_gb
        await snapshot.release_many([claim.vm_id for claim in claims])
        assert (await snapshot.shared_pools())[pool].allocated_gb == 0
        for host in hosts:
            await snapshot.forget_host(host)
        assert taken == (60 if all(r.outcome == "claimed" for r in claimed.results) else 0)
        return [result.outcome for result in claimed.results]

    assert stores.loop.run(claim_two(60)) == ["claimed", "claimed"]
    assert stores.loop.run(claim_two(59)) == ["gang", "storage"]
