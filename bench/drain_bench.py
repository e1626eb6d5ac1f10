"""Drain benchmark: empty a host of 100 simulated VMs by live migration, max_parallel=8.

    python bench/drain_bench.py [--vms 100] [--max-parallel 8] [--runs 3] [--migration-delay 0] [--out x.json]

Target (issue 15): draining a host with 100 simulated VMs completes in at most 30 seconds with
max_parallel=8. What runs: API, 2 scheduler replicas and the gateway (devtools.Stack) against an own
RabbitMQ vhost, PostgreSQL database and Redis key prefix (``isolated`` of bench/e2e/isolation.py), and a
simulated fleet in this process whose agents declare ``migrate``: one source host per run and
``--targets`` spare hosts. Each run pauses every host but its source, places ``--vms`` VMs there
(untimed), pauses the source, unpauses the spares, then times POST /v1/hosts/{id}/drain to the
drain's state ``drained`` (GET every 0.1 s). Each step of a simulated migration takes
``--migration-delay`` seconds (default 0: the figure is vmsched's own cost: the gateway's drain
sweep, every second, the schedulers choosing targets, the agents' messages).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
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

from bench.e2e.isolation import isolated  # noqa: E402
from bench.placement_bench import git_commit  # noqa: E402
from devtools.stack import Stack, free_port  # noqa: E402
from vmsched_agent import Profile, generate_hosts  # noqa: E402
from vmsched_agent.simulator import SimulatedFleet  # noqa: E402
from vmsched_contract.messages import Resources  # noqa: E402
from vmsched_runtime.logs import configure_logging  # noqa: E402

BUDGET_S = 30.0
SCHEDULERS = 2
HEARTBEAT_INTERVAL = 2.0
PREFIX = "drain"
CAPACITY = Resources(cpu=128, memory_mb=256 * 1024, disk_gb=4000)
VM = {"cpu": 1, "memory_mb": 1024, "disk_gb": 10}


async def until(check: Any, what: str, timeout: float, interval: float = 0.2) -> Any:
    """Poll ``check()`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


async def pause_all_but(api: httpx.AsyncClient, hosts: list[str], open_ones: set[str]) -> None:
    for host_id in hosts:
        response = await api.patch(f"/v1/hosts/{host_id}", json={"scheduling_paused": host_id not in open_ones})
        response.raise_for_status()


async def fill(api: httpx.AsyncClient, source: str, run: int, vms: int) -> list[str]:
    """``vms`` running VMs, all on ``source`` (the only host unpaused)."""
    bodies = [{"name": f"{PREFIX}-r{run}-{n}", **VM} for n in range(vms)]
    response = await api.post("/v1/vms/batch", json={"vms": bodies})
    response.raise_for_status()
    ids = [vm["id"] for vm in response.json()["items"]]

    async def all_running() -> bool:
        listed = await api.get("/v1/vms", params={"status": "running", "hypervisor_id": source, "limit": 1000})
        return len({vm["id"] for vm in listed.json()["items"]} & set(ids)) == vms

    await until(all_running, f"{vms} VMs on {source}", timeout=120)
    return ids


async def one_run(
    api: httpx.AsyncClient, hosts: list[str], source: str, targets: list[str], run: int, args: Any
) -> dict[str, Any]:
    await pause_all_but(api, hosts, {source})
    await fill(api, source, run, args.vms)
    await pause_all_but(api, hosts, set(targets))
    started = time.monotonic()
    response = await api.post(
        f"/v1/hosts/{source}/drain", json={"max_parallel": args.max_parallel, "deadline_s": int(BUDGET_S * 10)}
    )
    response.raise_for_status()
    most = 0
    while True:
        progress = (await api.get(f"/v1/hosts/{source}/drain")).json()
        most = max(most, len(progress["in_flight"]))
        if progress["state"] != "draining":
            break
        await asyncio.sleep(0.1)
    seconds = time.monotonic() - started
    if progress["state"] != "drained":
        raise RuntimeError(f"drain of {source} ended {progress['state']}: {progress['stuck'][:3]}")
    host = (await api.get(f"/v1/hosts/{source}")).json()
    return {
        "source": source,
        "seconds": round(seconds, 2),
        "moved": len(progress["moved"]),
        "most_in_flight_seen": most,
        "vms_left_on_source": host["vm_count"],
    }


async def drive(stack: Stack, iso_env: dict[str, str], args: Any) -> list[dict[str, Any]]:
    sources = generate_hosts(args.runs, prefix=f"{PREFIX}-src", capacity=CAPACITY, profile=Profile.UNIFORM)
    spares = generate_hosts(args.targets, prefix=f"{PREFIX}-dst", capacity=CAPACITY, profile=Profile.UNIFORM)
    hosts = [h.id for h in sources + spares]
    targets = [h.id for h in spares]
    async with (
        SimulatedFleet(
            sources + spares,
            amqp_url=iso_env["VMSCHED_AMQP_URL"],
            heartbeat_interval=HEARTBEAT_INTERVAL,
            migration_delay=args.migration_delay,
            record_commands=False,
        ),
        stack.async_client(timeout=60) as api,
    ):

        async def all_online() -> bool:
            listed = (await api.get("/v1/hosts")).json()
            return sum(1 for h in listed if h["status"] == "online") == len(hosts)

        await until(all_online, f"{len(hosts)} hosts online", timeout=120)
        results = []
        for run, source in enumerate(h.id for h in sources):
            result = await one_run(api, hosts, source, targets, run, args)
            print(
                f"  run {run + 1}: {result['moved']} VMs off {source} in {result['seconds']:.2f} s "
                f"(at most {result['most_in_flight_seen']} in flight seen)",
                flush=True,
            )
            results.append(result)
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vms", type=int, default=100)
    parser.add_argument("--max-parallel", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", type=int, default=8, help="spare hosts the VMs move to")
    parser.add_argument("--migration-delay", type=float, default=0.0, help="seconds per simulated migration step")
    parser.add_argument("--out", type=Path, default=None, help="JSON report path")
    parser.add_argument(
        "--check", action="store_true", help=f"exit 1 if the median drain takes more than {BUDGET_S:g} s"
    )
    args = parser.parse_args()

    configure_logging("drain-bench", "WARNING", "json")  # the in-process agents: only what goes wrong
    env = {
        "VMSCHED_RATE_LIMIT": "0",
        "VMSCHED_AGENT_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL),
        "VMSCHED_AGENT_OFFLINE_TIMEOUT": str(HEARTBEAT_INTERVAL * 5),
    }
    with isolated(**env) as iso, tempfile.TemporaryDirectory(prefix="drain-bench-") as workdir:
        stack = Stack(env=dict(iso.env), log_dir=Path(workdir), api_port=free_port())
        with stack.running(schedulers=SCHEDULERS):
            print(
                f"drain: {args.vms} VMs, max_parallel {args.max_parallel}, {args.targets} spare hosts, {args.runs} runs"
            )
            runs = asyncio.run(drive(stack, iso.env, args))
    seconds = [r["seconds"] for r in runs]
    median = statistics.median(seconds)
    within = median <= BUDGET_S
    print(f"drain: median {median:.2f} s, max {max(seconds):.2f} s  budget {BUDGET_S:g} s {'ok' if within else 'OVER'}")

    out = args.out or Path(__file__).parent / "results" / f"drain-{datetime.now(UTC):%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "drain",
        "recorded_at": datetime.now(UTC).isoformat(),
        "git_commit": git_commit(),
        "settings": {
            "vms": args.vms,
            "max_parallel": args.max_parallel,
            "runs": args.runs,
            "spare_hosts": args.targets,
            "schedulers": SCHEDULERS,
            "migration_delay_s": args.migration_delay,
            "budget_s": BUDGET_S,
        },
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": sys.version,
        },
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
