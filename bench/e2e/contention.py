"""On a fleet without overcommit: a mixed pool filled to 80% by both schedulers (claim conflicts
under contention), and packing (best_fit against the lower bound, least_loaded's spread)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

from bench.e2e.fleets import stack_with_fleets
from bench.e2e.isolation import isolated
from bench.e2e.load import Phase, post_all, wait_received
from bench.e2e.plan import Plan
from bench.e2e.recorded import placement_costs
from bench.e2e_fleet import UNIFORM_CAPACITY
from bench.e2e_stats import hosts_lower_bound, utilisation_spread
from vmsched_agent import Profile, generate_hosts

MIXED_SIZES = [  # (cpu, memory MiB, disk GB), a mixed-size workload
    (1, 2048, 20),
    (2, 4096, 40),
    (4, 8192, 80),
    (8, 16384, 160),
    (16, 32768, 320),
]


def mixed_body(index: int, rng: random.Random, **extra: Any) -> dict[str, Any]:
    cpu, memory, disk = rng.choices(MIXED_SIZES, weights=[30, 30, 20, 15, 5])[0]
    return {"name": f"m{index}", "cpu": cpu, "memory_mb": memory, "disk_gb": disk, **extra}


async def host_rows(database_url: str, prefix: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        return list(await conn.fetch("SELECT * FROM hosts WHERE id LIKE $1", f"{prefix}-%"))
    finally:
        await conn.close()


def contention_and_packing(plan: Plan, workdir: Path) -> dict[str, Any]:
    """A mixed pool filled to 80% cpu by both schedulers (claim conflicts), then two pools of
    identical hosts given the same mixed workload, one with best_fit, one with least_loaded."""
    print("== contention (80% full) and packing", flush=True)
    rng = random.Random(11)
    specs = [
        ("fill", plan.fill_hosts, "mixed", "pool=fill", 1.0),
        ("bf", plan.pack_hosts, "uniform", "pool=bf", 1.0),
        ("ll", plan.pack_hosts, "uniform", "pool=ll", 1.0),
    ]
    with isolated() as iso, stack_with_fleets(iso, workdir, specs) as (stack, fleets, _):
        fill_hosts = generate_hosts(plan.fill_hosts, capacity=UNIFORM_CAPACITY, profile=Profile.MIXED, seed=7)
        fill_cpu = sum(h.capacity.cpu for h in fill_hosts)
        fill_load: list[dict[str, Any]] = []
        while sum(b["cpu"] for b in fill_load) < 0.8 * fill_cpu:
            fill_load.append(mixed_body(len(fill_load), rng, labels={"pool": "fill"}))
        pack_cpu = plan.pack_hosts * UNIFORM_CAPACITY.cpu * 0.6  # 60% of the pool by cpu
        workload: list[dict[str, Any]] = []
        while sum(b["cpu"] for b in workload) < pack_cpu:
            workload.append(mixed_body(len(workload), rng))

        async def drive() -> tuple[Phase, Phase, Phase]:
            async with stack.async_client(timeout=60) as client:
                # The fill alone first: its conflicts are the two schedulers racing for that pool.
                fill = Phase("fill-80%", None, 500)
                await post_all(client, fill_load, fill)
                await asyncio.to_thread(wait_received, fleets, fill.sent)
                bf, ll = Phase("best_fit", None, 500), Phase("least_loaded", None, 500)
                await asyncio.gather(
                    post_all(client, [{**b, "labels": {"pool": "bf"}, "strategy": "best_fit"} for b in workload], bf),
                    post_all(
                        client, [{**b, "labels": {"pool": "ll"}, "strategy": "least_loaded"} for b in workload], ll
                    ),
                )
                return fill, bf, ll

        fill, bf, ll = uvloop.run(drive())
        missing = wait_received(fleets, {**fill.sent, **bf.sent, **ll.sent})
        costs = asyncio.run(placement_costs(iso.env["VMSCHED_DATABASE_URL"], list(fill.sent)))
        pools = {name: asyncio.run(host_rows(iso.env["VMSCHED_DATABASE_URL"], name)) for name in ("bf", "ll", "fill")}
    host = UNIFORM_CAPACITY.model_dump()
    demands = [{k: b[k] for k in ("cpu", "memory_mb", "disk_gb")} for b in workload]
    bound = hosts_lower_bound(demands, [host] * plan.pack_hosts)
    used = {name: sum(1 for r in rows if r["vm_count"] > 0) for name, rows in pools.items()}

    def spread(pool: str) -> dict[str, float]:
        rows = pools[pool]
        shares = utilisation_spread([r["alloc_cpu"] for r in rows], [r["cpu"] for r in rows])
        return {k: round(v, 4) for k, v in shares.items()}

    return {
        "missing": missing,
        "fill": {
            "hosts": plan.fill_hosts,
            "vms": len(fill_load),
            "cpu_utilisation": round(sum(r["alloc_cpu"] for r in pools["fill"]) / fill_cpu, 3),
            **costs,
        },
        "packing": {
            "pool_hosts": plan.pack_hosts,
            "host": host,
            "vms": len(workload),
            "lower_bound_hosts": bound,
            "best_fit_hosts": used["bf"],
            "best_fit_over_bound": round(used["bf"] / bound, 3),
            "least_loaded_hosts": used["ll"],
            "least_loaded_cpu_spread": spread("ll"),
            "best_fit_cpu_spread": spread("bf"),
        },
    }
