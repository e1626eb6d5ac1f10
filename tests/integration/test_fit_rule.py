"""The one fit rule, four ways: Python (vmsched_domain.fit), the engine's numpy filters, the Redis
claim (Lua rendered from the rule) and PostgreSQL's guard (SQL rendered from the rule). Hypothesis
throws random hosts and requests at all four, on the real Redis and PostgreSQL, and demands the same
answer, down to the resource a refusal names; named extra resources included. Redis and PostgreSQL
must also book exactly what was asked when the VM fits, and nothing when it does not."""

from __future__ import annotations

import json
import random
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
from vmsched_contract.messages import ZERO, Overcommit, Resources
from vmsched_contract.strategy import Strategy
from vmsched_domain.fit import shortfalls
from vmsched_pg.rows import HOST_COLUMNS, host_from_row
from vmsched_placement import FILTERS, DecisionContext, Fleet, HostState, PlacementRequest, Weights
from vmsched_placement.filters import ExtraFilter
from vmsched_placement.filters.resources import ResourceFilter
from vmsched_placement.inputs import demand_of
from vmsched_placement.model import RequestVector
from vmsched_redis.host_hash import HostWrite
from vmsched_scheduler.ports import Committed, Placement

RESOURCE_FILTERS = [f for f in FILTERS if isinstance(f, ResourceFilter | ExtraFilter)]


@pytest.fixture(scope="module")
def stores(servers: Servers) -> Iterator[Stores]:
    with module_stores(servers, "fit") as opened:
        yield opened


amounts = st.sampled_from([0, 0, 1, 2, 3, 4, 7, 8, 10, 16, 100])
ratios = st.sampled_from([1.0, 1.0, 1.1, 1.5, 2.0, 0.7, 4.0, 1.3333333333333333, 16.0])
EXTRA_NAMES = ["fpga", "nic", "example.com/ssd"]


@st.composite
def resources(draw: st.DrawFn, small: bool = False, *, extras: bool = True) -> Resources:
    pick = st.sampled_from([0, 0, 1, 2, 3]) if small else amounts
    # Half of them without extras; the others with a few names, some a host or VM may lack.
    extra = draw(
        st.one_of(st.just({}), st.dictionaries(st.sampled_from(EXTRA_NAMES), st.sampled_from([1, 1, 2, 3]), max_size=3))
        if extras
        else st.just({})
    )
    return Resources(
        cpu=draw(pick),
        memory_mb=draw(pick) * 512,
        disk_gb=draw(pick) * 10,
        gpu=draw(st.sampled_from([0, 0, 1, 2])),
        extra=extra,
    )


@dataclass(frozen=True)
class Case:
    capacity: Resources
    reserved: Resources
    overcommit: Overcommit
    allocated: Resources
    request: Resources


cases = st.builds(
    Case,
    capacity=resources(),
    reserved=resources(small=True, extras=False),  # nothing of an extra resource is reserved
    overcommit=st.builds(Overcommit, cpu=ratios, memory=ratios, disk=ratios),
    allocated=resources(),
    request=resources(small=True),
)


# Cases about named extra resources alone, at their edges: every other resource fits, a few names
# with small counts (a name a host lacks, one it has exactly enough of, one over its capacity, a
# request of 0), so that Hypothesis meets each boundary many times.
few_extras = st.dictionaries(st.sampled_from(EXTRA_NAMES[:2]), st.integers(0, 3), max_size=2)
extra_cases = st.builds(
    lambda capacity, allocated, request: Case(
        capacity=Resources(cpu=64, memory_mb=65536, disk_gb=1000, extra=capacity),
        reserved=ZERO,
        overcommit=Overcommit(),
        allocated=Resources(cpu=0, memory_mb=0, disk_gb=0, extra=allocated),
        request=Resources(cpu=1, memory_mb=512, disk_gb=10, extra=request),
    ),
    few_extras,
    few_extras.map(lambda counts: {name: count for name, count in counts.items() if count}),  # as hosts hold them
    few_extras,
)


def in_python(case: Case) -> str | None:
    missing = shortfalls(case.request, case.capacity, case.reserved, case.overcommit, case.allocated)
    return missing[0].resource if missing else None


def in_the_engine(case: Case) -> str | None:
    host = HostState(
        id="hv-fit",
        status="online",
        labels={},
        capacity=demand_of(case.capacity),
        allocated=demand_of(case.allocated),
        reserved=demand_of(case.reserved),
        vm_count=0,
        scheduling_paused=False,
        last_heartbeat=0.0,
        cpu_ratio=case.overcommit.cpu,
        memory_ratio=case.overcommit.memory,
        disk_ratio=case.overcommit.disk,
    )
    fleet = Fleet.from_hosts([host])
    request = PlacementRequest("vm", "vm", demand_of(case.request), {}, Strategy.BEST_FIT)
    context = DecisionContext(now=0.0, offline_timeout=1.0, weights=Weights(), rng=random.Random(0))
    vector = RequestVector.of(request, context)
    for host_filter in RESOURCE_FILTERS:
        passes = host_filter.mask(fleet.columns, vector)
        if passes is not None and not bool(passes[0]):
            return host_filter.NAME
    return None


async def in_redis(stores: Stores, case: Case) -> str | None:
    """What the claim says; its release must leave the host's allocations as they were."""
    host_id = f"hv-{uuid.uuid4().hex[:8]}"
    await stores.snapshot.record_heartbeats(
        [
            HostWrite(
                host_id=host_id,
                capacity=case.capacity,
                overcommit=case.overcommit,
                reserved=case.reserved,
                labels={},
                status="online",
                heartbeat_at=time.time(),
                paused=False,
                allocated=case.allocated,
                vm_count=0,
            )
        ],
        bump_interval=60.0,
    )
    vm_id = uuid.uuid4()
    result = await stores.snapshot.claim(vm_id, host_id, case.request, time.time())
    claimed = (await stores.snapshot.read_hosts([host_id]))[host_id]
    await stores.snapshot.release(vm_id)
    released = (await stores.snapshot.read_hosts([host_id]))[host_id]
    await stores.snapshot.forget_host(host_id)
    assert result.outcome in ("claimed", "insufficient"), result
    assert claimed is not None
    assert released is not None
    assert claimed.allocated == (case.allocated.plus(case.request) if result.outcome == "claimed" else case.allocated)
    assert released.allocated == case.allocated
    return None if result.outcome == "claimed" else result.detail


def amounts_of(resources: Resources, prefix: str = "") -> dict[str, int]:
    return {f"{prefix}{name}": getattr(resources, name) for name in ("cpu", "memory_mb", "disk_gb", "gpu")}


async def in_postgresql(stores: Stores, case: Case) -> Committed:
    """What the guard says; a VM it places must grow the host's allocations by exactly its ask."""
    host_id, vm_id = f"hv-{uuid.uuid4().hex[:8]}", uuid.uuid4()
    columns = {
        **amounts_of(case.capacity),
        **amounts_of(case.reserved, "reserved_"),
        **amounts_of(case.allocated, "alloc_"),
        "cpu_ratio": case.overcommit.cpu,
        "memory_ratio": case.overcommit.memory,
        "disk_ratio": case.overcommit.disk,
    }
    async with stores.engine.begin() as connection:
        await connection.execute(
            text(
                f"INSERT INTO hosts (id, status, extra, alloc_extra, {', '.join(columns)}) "
                "VALUES (:id, 'online', CAST(:extra AS jsonb), CAST(:alloc_extra AS jsonb), "
                f"{', '.join(':' + name for name in columns)})"
            ),
            {
                "id": host_id,
                "extra": json.dumps(case.capacity.extra),
                "alloc_extra": json.dumps(case.allocated.extra),
                **columns,
            },
        )
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, cpu, memory_mb, disk_gb, gpu, extra) "
                "VALUES (:id, 'fit', 'pending', :cpu, :memory_mb, :disk_gb, :gpu, CAST(:extra AS jsonb))"
            ),
            {"id": vm_id, **amounts_of(case.request), "extra": json.dumps(case.request.extra)},
        )
    record = PlacementRecord(
        strategy=Strategy.BEST_FIT,
        host=host_id,
        considered=1,
        eligible=1,
        decided_at="2026-01-01T00:00:00Z",
        decision_us=1.0,
    )
    settled = await stores.ledger.settle([Placement(vm_id, 1, host_id, case.request, Strategy.BEST_FIT, record)], [])
    async with stores.engine.begin() as connection:
        host = (
            await connection.execute(text(f"SELECT {HOST_COLUMNS} FROM hosts WHERE id = :id"), {"id": host_id})
        ).one()
        placed = settled.placements[0].outcome is Committed.PLACED
        assert host_from_row(host).allocated == (case.allocated.plus(case.request) if placed else case.allocated)
        await connection.execute(text("DELETE FROM vms WHERE id = :id"), {"id": vm_id})
        await connection.execute(text("DELETE FROM hosts WHERE id = :id"), {"id": host_id})
    return settled.placements[0].outcome


def agree(stores: Stores, case: Case) -> None:
    expected = in_python(case)
    assert in_the_engine(case) == expected
    assert stores.loop.run(in_redis(stores, case)) == expected
    assert stores.loop.run(in_postgresql(stores, case)) is (
        Committed.PLACED if expected is None else Committed.HOST_REFUSED
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases)
def test_python_the_engine_redis_and_postgresql_agree_on_every_fit(stores: Stores, case: Case) -> None:
    agree(stores, case)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=extra_cases)
def test_python_the_engine_redis_and_postgresql_agree_on_named_extra_resources(stores: Stores, case: Case) -> None:
    agree(stores, case)


def test_the_rule_checks_only_what_a_vm_asks_for() -> None:
    over_on_gpus = Case(
        capacity=Resources(cpu=16, memory_mb=32768, disk_gb=500, gpu=1),
        reserved=ZERO,
        overcommit=Overcommit(),
        allocated=Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=2),
        request=Resources(cpu=2, memory_mb=1024, disk_gb=10, gpu=0),
    )
    assert in_python(over_on_gpus) is None
    assert in_python(Case(**{**over_on_gpus.__dict__, "request": Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=1)})) == (
        "gpu"
    )


def test_the_rule_checks_only_the_extra_resources_a_vm_asks_for() -> None:
    base = Case(
        capacity=Resources(cpu=16, memory_mb=32768, disk_gb=500, extra={"fpga": 2}),
        reserved=ZERO,
        overcommit=Overcommit(),
        allocated=Resources(cpu=0, memory_mb=0, disk_gb=0, extra={"fpga": 2, "nic": 5}),
        request=Resources(cpu=2, memory_mb=1024, disk_gb=10, extra={"ssd": 0}),
    )
    assert in_python(base) is None  # the host is over on nic, full on fpga: the VM asks for neither
    asking = {**base.__dict__, "request": Resources(cpu=2, memory_mb=1024, disk_gb=10, extra={"fpga": 1})}
    assert in_python(Case(**asking)) == "extra"
    (missing,) = shortfalls(Case(**asking).request, base.capacity, base.reserved, base.overcommit, base.allocated)
    assert missing.reason == "extra: needs 1 fpga, 0 fpga free (2 fpga total, 2 fpga allocated)"
