"""Dedicated hosts end to end on the real servers: an operator gives a host to a project (PATCH
dedicated_to, scope hosts:admin); it then takes that project's VMs only, whatever another VM
tolerates; a VM asking ``dedicated`` goes only to its project's dedicated hosts; preemption leaves
another project's dedicated host alone; ending the dedication opens the host again."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.stack import Stack, api_client
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Resources
from vmsched_contract.strategy import Strategy
from vmsched_domain.dedication import sql_takes, takes
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.ledger import PostgresLedger
from vmsched_scheduler.ports import Committed, Placement

SUITE = f"ded-{uuid.uuid4().hex[:6]}"
MINE, SHARED = f"{SUITE}-a", f"{SUITE}-b"  # the dedicated host has the lower id: first_fit tries it first
VM: dict[str, Any] = {"cpu": 1, "memory_mb": 256, "disk_gb": 1, "labels": {"suite": SUITE}, "strategy": "first_fit"}
ANY_TAINT = [{"operator": "Exists"}]
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = [
        HostSpec(id=host_id, capacity=Resources(cpu=2, memory_mb=4096, disk_gb=100), labels={"suite": SUITE})
        for host_id in (MINE, SHARED)
    ]
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running_fleet:
        async with stack.async_client() as api:
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"] in (MINE, SHARED) and h["status"] == "online") == 2,
                timeout=60,
                what="the dedicated fleet online",
            )
        yield running_fleet


async def _decided(api: httpx.AsyncClient, name: str, **asked: Any) -> dict[str, Any]:
    created = await api.post("/v1/vms", json={"name": f"{SUITE}-{name}", **VM, **asked})
    assert created.status_code == 202, created.text
    found = await eventually(
        lambda: api.get(f"/v1/vms/{created.json()['id']}"),
        lambda r: r.json()["status"] not in ("pending", "scheduled"),
        timeout=30,
        what=f"{name} decided",
    )
    vm: dict[str, Any] = found.json()
    return vm


async def _gone(api: httpx.AsyncClient, vm: dict[str, Any]) -> None:
    assert (await api.delete(f"/v1/vms/{vm['id']}")).status_code == 202
    await eventually(
        lambda: api.get(f"/v1/vms/{vm['id']}"),
        lambda r: r.json()["status"] == "deleted",
        timeout=30,
        what=f"{vm['name']} deleted",
    )


async def test_a_dedicated_host_takes_only_its_projects_vms(
    stack: Stack, servers: Servers, fleet: SimulatedFleet
) -> None:
    async with stack.async_client(timeout=30) as admin:
        project = f"{SUITE}-p"
        assert (await admin.post("/v1/projects", json={"name": project, "quota": {}})).status_code == 201
        token = await admin.post(
            "/v1/tokens",
            json={"name": f"{SUITE}-t", "project": project, "scopes": ["vms:read", "vms:write", "hosts:read"]},
        )
        assert token.status_code == 201, token.text
        async with api_client(stack.api_url, token.json()["token"], timeout=30) as theirs:
            # Only hosts:admin may dedicate a host; a bad project name is a 422 naming the field.
            refused = await theirs.patch(f"/v1/hosts/{MINE}", json={"dedicated_to": project})
            assert refused.status_code == 403
            bad = await admin.patch(f"/v1/hosts/{MINE}", json={"dedicated_to": "Not A Project"})
            assert bad.status_code == 422
            assert bad.json()["detail"][0]["loc"] == ["body", "dedicated_to"]
            dedicated = await admin.patch(f"/v1/hosts/{MINE}", json={"dedicated_to": project})
            assert dedicated.status_code == 200, dedicated.text
            assert dedicated.json()["dedicated_to"] == project
            assert (await admin.get(f"/v1/hosts/{SHARED}")).json()["dedicated_to"] is None
            info = await admin.get(f"/v1/hosts/{MINE}/scheduling-info")
            assert f"Dedicated to: {project}" in info.text.splitlines()
            redis = Redis.from_url(servers.redis_url, decode_responses=True)
            try:
                read = await Snapshot(redis, servers.redis_key_prefix).read_hosts([MINE])
            finally:
                await redis.aclose()
            host = read[MINE]
            assert host is not None
            assert host.dedicated_to == project

            # Another project's VM never lands there, whatever it tolerates.
            other = await _decided(admin, "other", tolerations=ANY_TAINT, priority=1000)
            assert other["hypervisor_id"] == SHARED, other
            decision = (await admin.get(f"/v1/vms/{other['id']}/placement")).json()["decision"]
            assert decision["rejections"]["dedicated"] >= 1
            nowhere = await _decided(admin, "other-dedicated", dedicated=True)
            assert nowhere["status"] == "unschedulable", nowhere
            assert (await admin.get(f"/v1/vms/{nowhere['id']}/placement")).json()["decision"]["reason"] == "dedicated"

            # The project's VMs: dedicated ones only there, others there first (first_fit) too.
            own = await _decided(theirs, "own-dedicated", dedicated=True, priority=0)
            assert (own["hypervisor_id"], own["dedicated"]) == (MINE, True), own
            plain = await _decided(theirs, "own-plain")
            assert plain["hypervisor_id"] == MINE, plain

            # The shared host is full (2 cpu: "other" and one more, both of priority 1000); a VM of
            # the default project of priority 900 may not preempt the project's VMs (0) on its host.
            blocker = await _decided(admin, "blocker", priority=1000)
            assert blocker["hypervisor_id"] == SHARED, blocker
            preemptor = await _decided(admin, "preemptor", priority=900)
            assert preemptor["status"] == "unschedulable", preemptor
            for vm_id in (own["id"], plain["id"]):
                assert (await theirs.get(f"/v1/vms/{vm_id}")).json()["status"] == "running"

            # Ending the dedication opens the host to every project again.
            ended = await admin.patch(f"/v1/hosts/{MINE}", json={"dedicated_to": None})
            assert ended.json()["dedicated_to"] is None
            await _gone(theirs, plain)
            after = await eventually(
                lambda: _decided(admin, f"after-{uuid.uuid4().hex[:4]}"),
                lambda vm: vm["hypervisor_id"] == MINE,
                timeout=30,
                what="a default-project VM on the undedicated host",
            )
            for vm in (other, blocker, after):
                await _gone(admin, vm)
            await _gone(theirs, own)


async def test_postgresqls_guard_refuses_a_placement_a_fresh_dedication_forbids(private_engine: AsyncEngine) -> None:
    """A scheduler decided on a snapshot that did not know the host's dedication yet (the PATCH lands
    in PostgreSQL first): its commit is refused, as it is for a host paused a moment ago."""
    async with private_engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, dedicated_to) VALUES "
                "('hv-ml', 'online', 64, 262144, 1000, 'ml'), ('hv-any', 'online', 64, 262144, 1000, NULL)"
            )
        )
    asked = [("web", False, "hv-ml"), ("ml", False, "hv-ml"), ("ml", True, "hv-any"), ("web", False, "hv-any")]
    asked += [("web", False, "hv-any"), ("ml", True, "hv-any")]  # settled together, below
    vm_ids = []
    for project, dedicated, _ in asked:
        vm_id = uuid.uuid4()
        async with private_engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, cpu, memory_mb, disk_gb, project, dedicated) "
                    "VALUES (:id, 'x', 'pending', 1, 512, 1, :project, :dedicated)"
                ),
                {"id": vm_id, "project": project, "dedicated": dedicated},
            )
        vm_ids.append(vm_id)
    record = PlacementRecord(
        strategy=Strategy.FIRST_FIT, host=None, considered=2, eligible=1, decided_at=NOW, decision_us=1.0
    )
    shape = Resources(cpu=1, memory_mb=512, disk_gb=1)
    # One VM per host per call: the guard keeps the prefix of a host's placements that fits.
    for index in (0, 1, 2, 3):
        vm_id, (_, _, host_id) = vm_ids[index], asked[index]
        placement = Placement(vm_id, 1, host_id, shape, Strategy.FIRST_FIT, record.model_copy(update={"host": host_id}))
        settled = await PostgresLedger(private_engine, default_strategy=Strategy.FIRST_FIT).settle([placement], [])
        expected = Committed.PLACED if index in (1, 3) else Committed.HOST_REFUSED
        assert settled.placements[0].outcome is expected, (asked[index], settled.placements[0])
    # Two on one host in one call: the second is refused even after one that fits (the rule is never
    # NULL in SQL, which the guard's running bool_and would skip).
    together = [
        Placement(vm_ids[index], 1, "hv-any", shape, Strategy.FIRST_FIT, record.model_copy(update={"host": "hv-any"}))
        for index in (4, 5)
    ]
    settled = await PostgresLedger(private_engine, default_strategy=Strategy.FIRST_FIT).settle(together, [])
    assert [result.outcome for result in settled.placements] == [Committed.PLACED, Committed.HOST_REFUSED]


async def test_the_guards_sql_is_the_rule_for_every_case(stack: Stack, servers: Servers) -> None:
    """vmsched_domain.dedication's rule and its SQL agree on every host dedication, project and ask
    (on the stack's database: any will do, the query reads no table)."""
    cases = list(itertools.product([None, "a", "b"], ["a", "b"], [False, True]))
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        rows = await conn.fetch(
            f"SELECT n, {sql_takes('h', 'vm')} AS takes"
            " FROM unnest($1::text[], $2::text[], $3::bool[]) WITH ORDINALITY AS c(dedicated_to, project, dedicated, n)"
            " CROSS JOIN LATERAL (SELECT c.dedicated_to) h CROSS JOIN LATERAL (SELECT c.project, c.dedicated) vm"
            " ORDER BY n",
            [case[0] for case in cases],
            [case[1] for case in cases],
            [case[2] for case in cases],
        )
    finally:
        await conn.close()
    assert [row["takes"] for row in rows] == [takes(*case) for case in cases]
    assert sum(takes(*case) for case in cases) == 6  # undedicated for the VMs not asking, or their project's
