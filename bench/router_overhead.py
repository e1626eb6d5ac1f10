"""What the cell router adds to a request: the same requests to one cell's API directly and through
a router in front of it, one after another (no concurrency: latency, not throughput).

    .venv/bin/python bench/router_overhead.py              # 300 requests of each kind
    ROUTER_BENCH_REQUESTS=1000 .venv/bin/python bench/router_overhead.py

One cell (API, gateway, scheduler) on an own RabbitMQ vhost, PostgreSQL database and Redis key
prefix, no hosts: every VM ends unschedulable, which does not matter to what is measured. The router
runs with ``VMSCHED_ROUTER_DECISION_WAIT=0`` (it answers as soon as the cell does) and then with
the default 2 s, where a create waits for the cell's decision (here: unschedulable at once, and no
next cell to try). Prints the median and p99 of each, in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.e2e_stats import median, percentile  # noqa: E402
from devtools.stack import BIN, Stack, bearer, free_port, wait_for  # noqa: E402
from tests.servers import Servers, drop_database, provide_servers  # noqa: E402

REQUESTS = int(os.environ.get("ROUTER_BENCH_REQUESTS", "300"))
TOKEN = "bench-" + os.urandom(24).hex()
BODY = {"name": "overhead", "cpu": 1, "memory_mb": 512, "disk_gb": 1}


@contextlib.contextmanager
def router(servers: Servers, cell: Stack, workdir: Path, decision_wait: str) -> Iterator[str]:
    port = free_port()
    database = f"vmsched_router_bench_{servers.run_id}"
    base = servers.database_url.rsplit("/", 1)[0]
    process = Stack(
        env={
            "VMSCHED_ROUTER_CELLS": json.dumps([{"name": "a", "url": cell.api_url, "token": TOKEN}]),
            "VMSCHED_ROUTER_DATABASE_URL": f"{base}/{database}",
            "VMSCHED_ROUTER_PORT": str(port),
            "VMSCHED_ROUTER_DECISION_WAIT": decision_wait,
            "VMSCHED_LOG_LEVEL": "WARNING",
        },
        log_dir=workdir,
    )
    service = process.add(
        f"router-{decision_wait}", [str(BIN / "vmsched-router")], ready_url=f"http://127.0.0.1:{port}/readyz"
    )
    service.start(process._env())
    try:
        wait_for(service.is_ready, 60, "the router")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.stop()
        with contextlib.suppress(Exception):
            drop_database(servers.database_url, database)


async def timed(base_url: str) -> dict[str, list[float]]:
    """Milliseconds of each POST /v1/vms, then of each GET /v1/vms/{id} of those VMs."""
    spent: dict[str, list[float]] = {"POST /v1/vms": [], "GET /v1/vms/{id}": []}
    ids = []
    async with httpx.AsyncClient(base_url=base_url, headers=bearer(TOKEN), timeout=30) as client:
        for _ in range(REQUESTS):
            started = time.perf_counter()
            answer = await client.post("/v1/vms", json=BODY)
            spent["POST /v1/vms"].append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])
        for vm_id in ids:
            started = time.perf_counter()
            answer = await client.get(f"/v1/vms/{vm_id}")
            spent["GET /v1/vms/{id}"].append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 200, answer.text
    return spent


def main() -> None:
    with provide_servers() as servers, tempfile.TemporaryDirectory() as work:
        workdir = Path(work)
        cell = Stack(
            env=servers.env(VMSCHED_BOOTSTRAP_TOKEN=TOKEN, VMSCHED_RATE_LIMIT="0"),
            log_dir=workdir / "cell",
            api_port=free_port(),
        )
        with cell.running(schedulers=1):
            asyncio.run(timed(cell.api_url))  # warm-up: pools, caches, the first plans
            results = {"direct": asyncio.run(timed(cell.api_url))}
            for wait in ("0", "2"):
                with router(servers, cell, workdir, wait) as url:
                    asyncio.run(timed(url))
                    results[f"router, decision wait {wait} s"] = asyncio.run(timed(url))
    print(f"{REQUESTS} sequential requests of each kind; load average {os.getloadavg()[0]:.1f}")
    for name, spent in results.items():
        shown = ", ".join(
            f"{kind} median {median(values):.1f} ms p99 {percentile(values, 99):.1f} ms"
            for kind, values in spent.items()
        )
        print(f"{name}: {shown}")


if __name__ == "__main__":
    main()
