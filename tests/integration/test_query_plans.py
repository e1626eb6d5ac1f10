"""The statements every placement runs find their VMs by id, whatever PostgreSQL's statistics say.

A burst of requests makes thousands of VMs pending faster than autovacuum analyzes the table (and
on a server with autovacuum off, never): with a status condition in the lookup, the planner, which
believes few VMs are pending, walks every pending VM instead of fetching the few by their id
(measured: 14 ms a round at saturation). Here the table is fresh and unanalyzed, with 6,000 pending
and 4,000 scheduled VMs, and no scan of it may read more rows than the statement names.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Resources
from vmsched_contract.strategy import Strategy
from vmsched_gateway.host_store import _ORPHANS, _VMS_UNKNOWN
from vmsched_gateway.report_store import _MARK_RUNNING
from vmsched_pg.outbox import _MARK_PUBLISHED
from vmsched_scheduler.ledger import _LOCK_VMS, _SETTLE_NO_HOSTS, _SETTLE_PLACEMENTS, _placement_params
from vmsched_scheduler.ports import Placement

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


async def _add_vms(engine: AsyncEngine, pending: int, scheduled: int) -> tuple[list[Any], list[Any]]:
    """``pending`` and ``scheduled`` new VMs (the latter on hv-p1), and up to NAMED ids of each."""
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb) VALUES ('hv-p1', 'online', 64, 65536, 1000)"
                " ON CONFLICT DO NOTHING"
            )
        )
        for status, host, count in (("pending", None, pending), ("scheduled", "hv-p1", scheduled)):
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb) "
                    "SELECT gen_random_uuid(), 'p', :status, :host, 1, 1, 1 FROM generate_series(1, :count)"
                ),
                {"status": status, "host": host, "count": count},
            )
        named = [
            [
                r.id
                for r in await connection.execute(text(f"SELECT id FROM vms WHERE status = :s LIMIT {NAMED}"), {"s": s})
            ]
            for s in ("pending", "scheduled")
        ]
    return named[0], named[1]


def _hot_statements(pending: list[Any], scheduled: list[Any]) -> dict[str, tuple[TextClause, dict[str, Any]]]:
    one_vm = Resources(cpu=1, memory_mb=1, disk_gb=1)
    placements = [Placement(vm, 1, "hv-p1", one_vm, Strategy.BEST_FIT, RECORD) for vm in pending]
    return {
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
        "a heartbeat's VMs": (  # all orphans
            _ORPHANS,
            {
                "hosts": ["hv-elsewhere"] * NAMED,
                "taken": [datetime.now(UTC) + timedelta(minutes=1)] * NAMED,
                "vm_ids": scheduled,
            },
        ),
    }


async def test_hot_statements_read_only_the_vms_they_name(private_engine: AsyncEngine) -> None:
    pending, scheduled = await _add_vms(private_engine, 6000, 4000)
    statements = _hot_statements(pending, scheduled)
    read = {
        name: await _rows_read(private_engine, statement, params) for name, (statement, params) in statements.items()
    }
    assert read == dict.fromkeys(statements, NAMED)


async def _rows_scanned(engine: AsyncEngine, statement: TextClause, params: dict[str, Any]) -> int:
    """Rows of ``vms`` a sequential scan read while ``statement`` ran, as the services run it (their
    connection's cached prepared statement), in a transaction rolled back."""
    count = text("SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_xact_user_tables WHERE relname = 'vms'")
    async with engine.connect() as connection:
        # The view shows what this backend has not yet reported, which may be more than this
        # transaction: the difference is the statement's.
        before = await connection.scalar(count)
        await connection.execute(statement, params)
        after = await connection.scalar(count)
        await connection.rollback()
    return int(after or 0) - int(before or 0)


async def test_plans_follow_the_table_as_it_grows(private_engine: AsyncEngine) -> None:
    """A service starts on a young table, so its connections prepare the hot statements while
    ``vms`` has a few rows; PostgreSQL then caches a generic plan costed for that size (a sequential
    scan) and, without an ANALYZE to invalidate it (autovacuum off, or behind), keeps it while the
    table grows: measured, 30 to 70 ms a statement at 17,000 VMs, and POST->scheduled latency going
    from under a second to several. The services' connections plan each execution for what it names
    and the table as it is."""
    pending, scheduled = await _add_vms(private_engine, NAMED, NAMED)
    statements = _hot_statements(pending, scheduled)
    for statement, params in statements.values():
        for _ in range(12):  # PostgreSQL considers a generic plan from the sixth execution on
            await _rows_scanned(private_engine, statement, params)
    statements["a silence check"] = (_VMS_UNKNOWN, {"hosts": ["hv-elsewhere"]})
    await _add_vms(private_engine, 6000, 4000)
    scanned = {
        name: await _rows_scanned(private_engine, statement, params) for name, (statement, params) in statements.items()
    }
    assert scanned == dict.fromkeys(statements, 0)
