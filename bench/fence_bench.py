"""Fencing benchmark: a host running 100 simulated VMs dies and an operator fences it; how long until
every one of its VMs runs again elsewhere.

    python bench/fence_bench.py [--vms 100] [--runs 3] [--targets 4] [--restart-delay 15] [--out x.json]

Target (issue 27): a fenced host's 100 VMs run again elsewhere within 30 s. What runs: API, 2
scheduler replicas and the gateway (devtools.Stack) against an own RabbitMQ vhost, PostgreSQL
database and Redis key prefix (``isolated`` of bench/e2e/isolation.py), and a simulated fleet in this
process: one source host per run and ``--targets`` spare hosts. Each run pauses every host but its
source, places ``--vms`` VMs there with ``restart_policy: on_failure`` (untimed), unpauses the spares,
cuts the source off (its agent stops: the host is dead), then times ``POST /v1/hosts/{id}/fence`` to
every VM ``running`` on another host (GET every 0.1 s). The time includes VMSCHED_RESTART_DELAY
(15 s by default, ``--restart-delay``): a failed VM waits that long before it is placed again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.drain_bench import pause_all_but, until  # noqa: E402
from bench.e2e.isolation import isolated  # noqa: E402
from bench.e2e.machine import machine  # noqa: E402
from bench.placement_bench import git_commit  # noqa: E402
from devtools.stack import Stack, free_port  # noqa: E402
from vmsched_agent import Profile, generate_hosts  # noqa: E402
from vmsched_agent.simulator import SimulatedFleet  # noqa: E402
from vmsched_contract.messages import Resources  # noqa: E402
from vmsched_runtime.logs import configure_logging  # noqa: E402

BUDGET_S = 30.0
SCHEDULERS = 2
HEARTBEAT_INTERVAL = 2.0
PREFIX = "fence"
CAPACITY = Resources(cpu=128, memory_mb=256 * 1024, disk_gb=4000)
VM = {"cpu": 1, "memory_mb": 1024, "disk_gb": 10, "restart_policy": "on_failure"}


async def running_on(api: httpx.AsyncClient, ids: set[str]) -> dict[str, str]:
    """Where each of ``ids`` runs now (those running)."""
    found: dict[str, str] = {}
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"status": "running", "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = (await api.get("/v1/vms", params=params)).json()
        found.update({vm["id"]: vm["hypervisor_id"] for vm in page["items"] if vm["id"] in ids})
        cursor = page.get("next_cursor")
        if not cursor:
            return found


async def one_run(
    api: httpx.AsyncClient, fleet: SimulatedFleet, hosts: list[str], source: str, targets: list[str], run: int, vms: int
) -> dict[str, Any]:
    await pause_all_but(api, hosts, {source})
    bodies = [{"name": f"{PREFIX}-r{run}-{n}", **VM} for n in range(vms)]
    response = await api.post("/v1/vms/batch", json={"vms": bodies})
    response.raise_for_status()
    ids = {vm["id"] for vm in response.json()["items"]}

    async def all_on_source() -> bool:
        return set((await running_on(api, ids)).values()) == {source} and len(await running_on(api, ids)) == vms

    await until(all_on_source, f"{vms} VMs running on {source}", timeout=120)
    await pause_all_but(api, hosts, set(targets))
    await fleet.cut_off(source)  # the host dies
    started = time.monotonic()
    fenced = await api.post(f"/v1/hosts/{source}/fence")
    fenced.raise_for_status()

    async def all_elsewhere() -> bool:
        where = await running_on(api, ids)
        return len(where) == vms and source not in where.values()

    await until(all_elsewhere, f"{vms} VMs running again off {source}", timeout=BUDGET_S * 6, interval=0.1)
    seconds = time.monotonic() - started
    host = (await api.get(f"/v1/hosts/{source}")).json()
    return {"source": source, "seconds": round(seconds, 2), "vms": vms, "source_vm_count": host["vm_count"]}


async def drive(stack: Stack, iso_env: dict[str, str], args: Any) -> list[dict[str, Any]]:
    sources = generate_hosts(args.runs, prefix=f"{PREFIX}-src", capacity=CAPACITY, profile=Profile.UNIFORM)
    spares = generate_hosts(args.targets, prefix=f"{PREFIX}-dst", capacity=CAPACITY, profile=Profile.UNIFORM)
    hosts = [h.id for h in sources + spares]
    async with (
        SimulatedFleet(
            sources + spares,
            amqp_url=iso_env["VMSCHED_AMQP_URL"],
            heartbeat_interval=HEARTBEAT_INTERVAL,
            record_commands=False,
        ) as fleet,
        stack.async_client(timeout=60) as api,
    ):

        async def all_online() -> bool:
            listed = (await api.get("/v1/hosts")).json()
            return sum(1 for h in listed if h["status"] == "online") == len(hosts)

        await until(all_online, f"{len(hosts)} hosts online", timeout=120)
        results = []
        for run, source in enumerate(h.id for h in sources):
            result = await one_run(api, fleet, hosts, source, [h.id for h in spares], run, args.vms)
            print(f"  run {run + 1}: {result['vms']} VMs of fenced {source} running again in {result['seconds']:.2f} s")
            results.append(result)
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vms", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", type=int, default=4, help="spare hosts the VMs restart on")
    parser.add_argument("--restart-delay", type=float, default=15.0, help="VMSCHED_RESTART_DELAY, seconds")
    parser.add_argument("--out", type=Path, default=None, help="JSON report path")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if the median takes more than {BUDGET_S:g} s")
    args = parser.parse_args()

    configure_logging("fence-bench", "WARNING", "json")  # the in-process agents: only what goes wrong
    env = {
        "VMSCHED_RATE_LIMIT": "0",
        "VMSCHED_AGENT_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL),
        "VMSCHED_AGENT_OFFLINE_TIMEOUT": str(HEARTBEAT_INTERVAL * 5),
        "VMSCHED_RESTART_DELAY": str(args.restart_delay),
    }
    with isolated(**env) as iso, tempfile.TemporaryDirectory(prefix="fence-bench-") as workdir:
        stack = Stack(env=dict(iso.env), log_dir=Path(workdir), api_port=free_port())
        with stack.running(schedulers=SCHEDULERS):
            print(
                f"fence: {args.vms} VMs, {args.targets} spare hosts, "
                f"restart delay {args.restart_delay:g} s, {args.runs} runs"
            )
            runs = asyncio.run(drive(stack, iso.env, args))
    seconds = [r["seconds"] for r in runs]
    median = statistics.median(seconds)
    within = median <= BUDGET_S
    print(f"fence: median {median:.2f} s, max {max(seconds):.2f} s  budget {BUDGET_S:g} s {'ok' if within else 'OVER'}")

    out = args.out or Path(__file__).parent / "results" / f"fence-{datetime.now(UTC):%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "fence",
        "recorded_at": datetime.now(UTC).isoformat(),
        "git_commit": git_commit(),
        "settings": {
            "vms": args.vms,
            "runs": args.runs,
            "spare_hosts": args.targets,
            "schedulers": SCHEDULERS,
            "restart_delay_s": args.restart_delay,
            "budget_s": BUDGET_S,
        },
        "machine": machine(),
        "runs": runs,
        "median_s": median,
        "max_s": max(seconds),
        "within_budget": within,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {out}")
    return 1 if args.check and not within else 0


if __name__ == "__main__":
    sys.exit(main())
