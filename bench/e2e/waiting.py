"""Placements beside a backlog of waiting VMs (issue 13): latency and saturation with none waiting,
then with 10,000 waiting in 100 shapes, while capacity is released all along."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

from bench.e2e.fleets import Fleet, stack_with_fleets
from bench.e2e.isolation import isolated
from bench.e2e.load import Phase, Senders, flat_out, paced, post_all, summarise, vm_body, wait_received
from bench.e2e.plan import LATENCY_RATE, THROUGHPUT_OVERCOMMIT_CPU, WARM_UP_SECONDS, Plan
from devtools.stack import Stack

WAITING_SHAPES = 100  # distinct shapes of the waiting VMs: the waker's cost per change is one test each
WAITING_VMS = 10_000
WAITING_SLOWDOWN_LIMIT = 0.10  # issue 13: waiting VMs may slow placements by at most 10%


async def count_waiting(database_url: str) -> int:
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        return int(await conn.fetchval("SELECT count(*) FROM vms WHERE status = 'waiting'"))
    finally:
        await conn.close()


async def delete_paced(senders: Senders, vm_ids: Sequence[str], rate: float) -> None:
    """DELETE these VMs at ``rate`` a second: capacity released all along, which the waker looks at."""
    last = len(senders.clients) - 1  # saturation's senders are the first few
    began = time.monotonic()
    for n, vm_id in enumerate(vm_ids):
        delay = began + n / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        (await (await senders.get(last)).delete(f"/v1/vms/{vm_id}")).raise_for_status()


async def placements_with_churn(
    stack: Stack, fleets: list[Fleet], plan: Plan, senders: Senders, label: str
) -> list[dict[str, Any]]:
    """The latency phase, then saturation while the latency phase's VMs are deleted (releases)."""
    latency = Phase(f"latency ({label})", LATENCY_RATE, 1)
    await paced(senders, latency, LATENCY_RATE, plan.latency_seconds, 1)
    latency_summary = summarise(latency, fleets, wait_received(fleets, latency.sent))
    saturation = Phase(f"saturation ({label})", None, 500)
    deleting = asyncio.create_task(delete_paced(senders, list(latency.sent), LATENCY_RATE))
    await flat_out(senders, saturation, plan.saturation_vms, 500)
    missing = wait_received(fleets, saturation.sent)
    await deleting
    return [latency_summary, summarise(saturation, fleets, missing)]


async def waiting_runs(stack: Stack, fleets: list[Fleet], plan: Plan, waiting: int) -> dict[str, Any]:
    senders = Senders(stack)
    database_url = stack.env["VMSCHED_DATABASE_URL"]
    try:
        warm_up = Phase("warm-up", LATENCY_RATE, 1)
        await paced(senders, warm_up, LATENCY_RATE, WARM_UP_SECONDS, 1)
        wait_received(fleets, warm_up.sent)
        before = await placements_with_churn(stack, fleets, plan, senders, "none waiting")
        # Small VMs that ask for a label no host has: they wait (an hour) whatever is released, and
        # every release is tested against each of their shapes.
        bodies = [
            vm_body(i, labels={"waits": f"w{i % WAITING_SHAPES}"}, wait_s=3600, name=f"w{i}") for i in range(waiting)
        ]
        parked = Phase("waiting backlog", None, 500)
        client = await senders.get(0)
        await post_all(client, bodies, parked)
        for _ in range(600):  # up to 5 minutes for the backlog to be decided
            found = await count_waiting(database_url)
            if found >= waiting:
                break
            await asyncio.sleep(0.5)
        print(f"  {found} VMs waiting", flush=True)
        await senders.aclose()  # fresh connections: none the long backlog requests left half-used
        senders = Senders(stack)
        after = await placements_with_churn(stack, fleets, plan, senders, f"{found} waiting")
    finally:
        await senders.aclose()

    def slowdown(key: str, index: int, higher_is_better: bool) -> float:
        a, b = before[index][key], after[index][key]
        return round((a - b) / a if higher_is_better else (b - a) / a, 3) if a else 0.0

    changes = {
        "latency_p99": slowdown("p99_ms", 0, False),
        "latency_p50": slowdown("p50_ms", 0, False),
        "saturation_per_s": slowdown("achieved_per_s", 1, True),
    }
    return {
        "waiting": found,
        "shapes": WAITING_SHAPES,
        "before": before,
        "after": after,
        "slowdown": changes,
        "within_limit": changes["saturation_per_s"] <= WAITING_SLOWDOWN_LIMIT,
    }


def waiting_backlog_run(plan: Plan, hosts: int, waiting: int, workdir: Path) -> dict[str, Any]:
    print(f"== placements beside {waiting} waiting VMs ({hosts} hosts)", flush=True)
    with (
        isolated() as iso,
        stack_with_fleets(iso, workdir, [("bench", hosts, "mixed", "", THROUGHPUT_OVERCOMMIT_CPU)]) as (
            stack,
            fleets,
            _,
        ),
    ):
        result = uvloop.run(waiting_runs(stack, fleets, plan, waiting))
    for key in ("before", "after"):
        for phase in result[key]:
            print(f"  {phase}", flush=True)
    print(f"  slowdown: {result['slowdown']}", flush=True)
    return result
