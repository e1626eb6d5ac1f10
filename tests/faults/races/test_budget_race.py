"""Four scheduler processes preempt at once, and the cheapest victims are members of one server group
whose disruption budget is 1 (docs/operations.md#disruption-budgets): four VMs of high priority, each
needing one low VM's room in a full fleet, submitted together. The group's members have the lowest
priority, so each scheduler would take one; the budget lets one go, and the other preemptors take
other VMs. Every preemptor runs; no host is overcommitted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from devtools.stack import Stack
from tests.faults.conftest import online_fleet, submit, wait_running, wait_settled
from tests.faults.invariants import check
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import Resources

pytestmark = pytest.mark.slow

SUITE = "budgetrace"
HOSTS = 4
HOST_CPU = 8
VM_CPU = 2
HIGH = 4


@pytest.fixture(scope="module")
async def budget_fleet(four_schedulers: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    capacity = Resources(cpu=HOST_CPU, memory_mb=65536, disk_gb=1000)
    async with online_fleet(four_schedulers, servers, SUITE, HOSTS, capacity, heartbeat_interval=2.0) as fleet:
        yield fleet


def vms(kind: str, count: int, priority: int, **extra: object) -> list[dict[str, object]]:
    return [
        {"name": f"{SUITE}-{kind}-{n}", "cpu": VM_CPU, "memory_mb": 512, "disk_gb": 5, "labels": {"suite": SUITE},
         "priority": priority, **extra}
        for n in range(count)
    ]  # fmt: skip


def table(rows: list[asyncpg.Record]) -> str:
    """The suite's VMs, one a line: what a failure needs to be understood without a rerun."""
    return "\n".join(
        f"{row['name']:<20} {row['status']:<12} {row['hypervisor_id'] or '-':<16} "
        f"preempted_by={row['preempted_by']} {row['status_reason'] or ''}"
        for row in rows
    )


async def test_four_schedulers_preempting_members_of_one_group_take_no_more_than_its_budget(
    four_schedulers: Stack, budget_fleet: SimulatedFleet, servers: Servers
) -> None:
    async with four_schedulers.async_client(timeout=120) as api:
        created = await api.post(
            "/v1/server-groups",
            json={"name": f"{SUITE}-g", "policy": "soft-anti-affinity", "max_unavailable": 1},
        )
        assert created.status_code == 201, created.text
        group_id = created.json()["id"]
        # One member per host (soft anti-affinity), the cheapest victims there (priority 0)...
        members = await submit(api, vms("member", HOSTS, 0, server_group=group_id), batch=HOSTS)
        await wait_settled(servers, members, timeout=120)
        # ...and the rest of each host filled with VMs a little dearer (priority 1).
        others = await submit(api, vms("other", HOSTS * (HOST_CPU // VM_CPU - 1), 1), batch=4)
        await wait_settled(servers, others, timeout=120)
        # The race needs every member available (a member not running uses the budget: the
        # preemptors would rightly take none) and the fleet full (else a VM fits without preempting).
        await wait_running(servers, members + others, at_least=len(members + others), timeout=60)
        high = await submit(api, vms("high", HIGH, 500), batch=1)  # four requests at once
        await wait_settled(servers, high, timeout=180)
        conn = await asyncpg.connect(servers.asyncpg_dsn)
        try:
            rows = await conn.fetch(
                "SELECT id::text AS id, name, status, status_reason, hypervisor_id, preempted_by, server_group "
                "FROM vms WHERE id = ANY($1::uuid[]) ORDER BY name",
                members + others + high,
            )
        finally:
            await conn.close()
        seen = f"\n{table(rows)}\nservice logs: {four_schedulers.log_dir}"
        assert len({row["hypervisor_id"] for row in rows if row["id"] in members}) == HOSTS, seen  # as set up
        assert [row["status"] for row in rows if row["id"] in high] == ["running"] * HIGH, seen
        preempted = [row for row in rows if row["preempted_by"] is not None]
        members_taken = [row for row in preempted if row["server_group"] is not None]
        print(f"budget race: {len(preempted)} preempted, {len(members_taken)} of them members of the group")
        assert len(preempted) == HIGH, seen  # one victim per preemptor
        assert len(members_taken) == 1, seen  # the budget: one member unavailable at most (they never restart)
        report = await check(servers.asyncpg_dsn, members + others + high, budget_fleet)
        assert report.problems == [], f"{report.problems}{seen}"
