"""The statements every placement runs find their VMs by id, whatever PostgreSQL's statistics say.

A burst of requests makes thousands of VMs pending faster than autovacuum analyzes the table (and
on a server with autovacuum off, never): with a status condition in the lookup, the planner, which
believes few VMs are pending, walks every pending VM instead of fetching the few by their id
(measured: 14 ms a round at saturation). Here the table is fresh and unanalyzed, with 6,000 pending
and 4,000 scheduled VMs, and no scan of it may read more rows than the statement names.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_common.decision import PlacementRecord
from vmsched_common.messages import Resources
from vmsched_common.outbox import _MARK_PUBLISHED
from vmsched_common.settings import Strategy
from vmsched_gateway.report_store import _MARK_RUNNING
from vmsched_scheduler.ledger import _LOCK_VMS, _SETTLE_NO_HOSTS, _SETTLE_PLACEMENTS, _placement_params
from vmsched_scheduler.ports import Placement

pytestmark = pytest.mark.integration

NAMED = 15
RECORD = PlacementRecord(
    strategy=Strategy.BEST_FIT,
    host="hv-p1",
    considered=1,
    eligible=1,
    decided_at="2026-01-01T00:00:00Z",
    decision_us=1.0,
)


async def _rows_read(engine: AsyncEngine, statement: TextClause, params: dict[str, Any]) -> int:
    """The most rows any scan of ``vms`` returned over all its loops, running ``statement`` with the plan a driver
    reuses (generic), in a transaction rolled back."""
    async with engine.connect() as connection:
        await connection.execute(text("SET plan_cache_mode = force_generic_plan"))
        plan = [row[0] for row in await connection.execute(text(f"EXPLAIN ANALYZE {statement.text}"), params)]
        await connection.rollback()
    scans = [line for line in plan if re.search(r"Scan (using \w+ )?on vms\b", line)]
    assert scans, plan
    read = []
    for line in scans:  # "rows" is per loop: a lookup repeated for each named VM reads one a loop
        found = re.search(r"actual time=\S+ rows=(\d+) loops=(\d+)", line)
        assert found is not None, line
        read.append(int(found.group(1)) * int(found.group(2)))
    return max(read)


async def test_hot_statements_read_only_the_vms_they_name(private_engine: AsyncEngine) -> None:
    async with private_engine.begin() as connection:
        await connection.execute(
            text("INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb) VALUES ('hv-p1', 'online', 64, 65536, 1000)")
        )
        for status, host, count in (("pending", None, 6000), ("scheduled", "hv-p1", 4000)):
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb) "
                    "SELECT gen_random_uuid(), 'p', :status, :host, 1, 1, 1 FROM generate_series(1, :count)"
                ),
                {"status": status, "host": host, "count": count},
            )
        pending = [
            r.id for r in await connection.execute(text(f"SELECT id FROM vms WHERE status = 'pending' LIMIT {NAMED}"))
        ]
        scheduled = [
            r.id for r in await connection.execute(text(f"SELECT id FROM vms WHERE status = 'scheduled' LIMIT {NAMED}"))
        ]
    one_vm = Resources(cpu=1, memory_mb=1, disk_gb=1)
    placements = [Placement(vm, 1, "hv-p1", one_vm, Strategy.BEST_FIT, RECORD) for vm in pending]
    statements: dict[str, tuple[TextClause, dict[str, Any]]] = {
        "a round's lock": (_LOCK_VMS, {"ids": pending}),
        "a round's placements": (_SETTLE_PLACEMENTS, _placement_params(placements)),
        "a round's VMs with no host": (
            _SETTLE_NO_HOSTS,
            {
                "vm_ids": pending,
                "reasons": ["cpu"] * NAMED,
                "strategies": ["best_fit"] * NAMED,
                "records": ["{}"] * NAMED,
            },
        ),
        "published marks": (_MARK_PUBLISHED, {"ids": [str(vm) for vm in pending]}),
        "running reports": (_MARK_RUNNING, {"ids": scheduled, "agents": ["hv-p1"] * NAMED}),
    }
    read = {
        name: await _rows_read(private_engine, statement, params) for name, (statement, params) in statements.items()
    }
    assert read == dict.fromkeys(statements, NAMED)
