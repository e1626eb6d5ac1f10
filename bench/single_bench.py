"""The single-request benchmark: one VM per ``POST /v1/vms``, the way most clients create VMs.

    python bench/single_bench.py                       # what `make bench` runs: 3 runs on 200 hosts
    python bench/single_bench.py --runs 1 --seconds 5  # a quick look (about 2 minutes)

On one stack (API, 2 schedulers, gateway: devtools.Stack) and an independent fleet process speaking
the queue contract (bench/e2e_fleet.py), on an own vhost, database and Redis prefix, each run:

- ``hop``: the broker's raw hop flat out, in the same run: confirmed publishes of 256-byte messages
  (about a one-VM ``vm.create``) to one quorum queue, consumed and acked (messages/s). A placement
  crosses three hops (``vm.create``, ``vm.assigned``, the agent's command), so ``hop / 3`` is the
  ceiling RabbitMQ alone would set if every VM travelled alone: the batch target is 0.75x of it;
- ``lone``: one client posting one VM after another: the response's p50 and p99;
- ``clients32``: 32 clients posting as fast as answers come: accepted POSTs/s, response p50/p99,
  and CPU per placement of every process on the machine (until every VM reached its agent);
- ``open100`` and ``open300``: an open loop at 100 and 300 POSTs/s: POST -> the agent taking the
  create command off its queue (both clocks this machine's), p50 and p99;
- ``batch``: ``POST /v1/vms/batch`` of 500 VMs, 3 at a time, flat out: placements/s end to end
  against ``hop / 3``, and CPU per placement.

For ``lone`` and ``clients32`` the API's own account of each request phase
(``vmsched_api_request_phase_seconds``, read from /metrics before and after) shows where a request
waits. The load generator is ``bench/wire_client.py`` (tens of µs a request, where httpx spent 1-2 ms,
taken from the machine under test). Results: ``bench/results/single-<date>.json``, medians of the
runs printed last beside each target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aio_pika
import asyncpg
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cpu_account import cpu_times, per_vm_ms, spent  # noqa: E402
from bench.e2e_bench import (  # noqa: E402
    Fleet,
    component_pids,
    git_commit,
    isolated,
    machine,
    profiled,
    stack_with_fleets,
    wait_received,
)
from bench.e2e_stats import median, percentile, sustained_rate  # noqa: E402
from bench.wire_client import WireClient  # noqa: E402
from devtools.stack import Stack  # noqa: E402

VM = {"cpu": 1, "memory_mb": 64, "disk_gb": 0}
OVERCOMMIT_CPU = 64.0  # 2,048 such VMs a 32-vCPU host: every run fits in 200 hosts
HOP_MESSAGES = 20_000
HOP_WINDOW = 256
CLIENTS = 32
BATCH = 500
BATCH_VMS = 6_000

# Issue 24's targets (this 2-core machine).
TARGETS = {
    "lone_p50_ms": 5.0,
    "lone_p99_ms": 15.0,
    "clients32_per_s": 1000.0,
    "clients32_hop_ratio": 0.2,
    "open100_p99_ms": 100.0,
    "open300_p99_ms": 250.0,
    "batch_ceiling_ratio": 0.75,
    "batch_cpu_ms": 1.5,
    "singles_cpu_ms": 2.5,
}


def body(n: int) -> bytes:
    return json.dumps({"name": f"s{n}", **VM}).encode()


# -- the broker's raw hop ------------------------------------------------------------------------
async def raw_hop(amqp_url: str, messages: int = HOP_MESSAGES) -> float:
    """Messages/s through one quorum queue, confirmed on publish and acked on consume, flat out."""
    connection = await aio_pika.connect(amqp_url)
    try:
        publishing = await connection.channel(publisher_confirms=True)
        consuming = await connection.channel()
        await consuming.set_qos(prefetch_count=HOP_WINDOW)
        name = f"bench.hop.{os.getpid()}"
        queue = await consuming.declare_queue(name, durable=True, arguments={"x-queue-type": "quorum"})
        payload = b"x" * 256  # about a one-VM vm.create
        done = asyncio.Event()
        received = 0

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received >= messages:
                done.set()

        await queue.consume(on_message)
        window = asyncio.Semaphore(HOP_WINDOW)

        async def publish(n: int) -> None:
            async with window:
                await publishing.default_exchange.publish(
                    aio_pika.Message(payload, delivery_mode=aio_pika.DeliveryMode.PERSISTENT, message_id=str(n)),
                    routing_key=name,
                )

        began = time.monotonic()
        await asyncio.gather(*(publish(n) for n in range(messages)))
        await asyncio.wait_for(done.wait(), 120)
        rate = messages / (time.monotonic() - began)
        await queue.delete(if_unused=False, if_empty=False)
        return rate
    finally:
        await connection.close()


# -- the API's phase histogram -------------------------------------------------------------------
PHASE_METRIC = "vmsched_api_request_phase_seconds"


def scrape_phases(api_url: str) -> dict[str, dict[str, Any]]:
    """Per phase: the histogram's buckets (le -> cumulative count), sum and count, as /metrics says."""
    with urllib.request.urlopen(f"{api_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    phases: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.startswith(PHASE_METRIC):
            continue
        name, _, value = line.rpartition(" ")
        labels = dict(part.split("=", 1) for part in name[name.index("{") + 1 : name.rindex("}")].split(","))
        labels = {key: raw.strip('"') for key, raw in labels.items()}
        entry = phases.setdefault(labels["phase"], {"buckets": {}, "sum": 0.0, "count": 0.0})
        if name.startswith(f"{PHASE_METRIC}_bucket"):
            entry["buckets"][float(labels["le"])] = float(value)
        elif name.startswith(f"{PHASE_METRIC}_sum"):
            entry["sum"] = float(value)
        elif name.startswith(f"{PHASE_METRIC}_count"):
            entry["count"] = float(value)
    return phases


def bucket_quantile(buckets: dict[float, float], q: float) -> float:
    """The q-quantile (0..1) of a cumulative histogram, interpolated within its bucket (Prometheus'
    histogram_quantile); NaN when empty."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return float("nan")
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return previous_bound
            share = (rank - previous_count) / (count - previous_count) if count > previous_count else 0.0
            return previous_bound + (bound - previous_bound) * share
        previous_bound, previous_count = bound, count
    return previous_bound


def phase_breakdown(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per phase between two scrapes: how many, mean, p50 and p99 in ms."""
    out: dict[str, Any] = {}
    for phase, now in after.items():
        then = before.get(phase, {"buckets": {}, "sum": 0.0, "count": 0.0})
        count = now["count"] - then["count"]
        if count <= 0:
            continue
        buckets = {le: n - then["buckets"].get(le, 0.0) for le, n in now["buckets"].items()}
        out[phase] = {
            "count": int(count),
            "mean_ms": round((now["sum"] - then["sum"]) / count * 1000, 3),
            "p50_ms": round(bucket_quantile(buckets, 0.5) * 1000, 3),
            "p99_ms": round(bucket_quantile(buckets, 0.99) * 1000, 3),
        }
    return out


# -- load ----------------------------------------------------------------------------------------
class Load:
    def __init__(self, stack: Stack) -> None:
        parts = urlsplit(stack.api_url)
        assert parts.hostname is not None
        assert parts.port is not None
        self.host, self.port, self.token = parts.hostname, parts.port, stack.token
        self.serial = 0

    def client(self) -> WireClient:
        return WireClient(self.host, self.port, self.token)

    def next_body(self) -> bytes:
        self.serial += 1
        return body(self.serial)


async def post_one(client: WireClient, load: Load, sent: dict[str, float], latencies: list[float], due: float) -> None:
    """One POST; ``due`` is when it was due (wall clock): end-to-end latency counts from then."""
    started = time.perf_counter()
    answer = await client.post("/v1/vms", load.next_body())
    latencies.append((time.perf_counter() - started) * 1000)
    if answer.status != 202:
        raise RuntimeError(f"POST /v1/vms answered {answer.status}: {answer.body[:300]!r}")
    sent[answer.json()["id"]] = due


async def closed_loop(load: Load, clients: int, seconds: float) -> tuple[dict[str, float], list[float], float]:
    """``clients`` clients, each posting as soon as its last answer came."""
    sent: dict[str, float] = {}
    latencies: list[float] = []
    began = time.monotonic()
    deadline = began + seconds

    async def client_loop() -> None:
        client = load.client()
        try:
            while time.monotonic() < deadline:
                await post_one(client, load, sent, latencies, time.time())
        finally:
            await client.aclose()

    await asyncio.gather(*(client_loop() for _ in range(clients)))
    return sent, latencies, time.monotonic() - began


async def open_loop(load: Load, rate: float, seconds: float) -> tuple[dict[str, float], list[float], float]:
    """``rate`` POSTs/s on a fixed schedule (no coordinated omission: a request's latency counts from
    when it was due, by as many connections as the answers need)."""
    sent: dict[str, float] = {}
    latencies: list[float] = []
    total = int(rate * seconds)
    began, wall = time.monotonic(), time.time()
    due = iter(range(total))
    pool = 64

    async def sender() -> None:
        client = load.client()
        try:
            for n in due:
                offset = n / rate
                delay = began + offset - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await post_one(client, load, sent, latencies, wall + offset)
        finally:
            await client.aclose()

    await asyncio.gather(*(sender() for _ in range(pool)))
    return sent, latencies, time.monotonic() - began


async def batches_flat_out(load: Load, total: int, in_flight: int = 3) -> tuple[dict[str, float], float]:
    sent: dict[str, float] = {}
    starts = list(range(0, total, BATCH))
    began = time.monotonic()

    async def worker() -> None:
        client = load.client()
        try:
            while starts:
                starts.pop()
                payload = json.dumps({"vms": [{"name": f"b{load.serial + i}", **VM} for i in range(BATCH)]})
                load.serial += BATCH
                at = time.time()
                answer = await client.post("/v1/vms/batch", payload.encode())
                if answer.status != 202:
                    raise RuntimeError(f"POST /v1/vms/batch answered {answer.status}: {answer.body[:300]!r}")
                for item in answer.json()["items"]:
                    sent[item["id"]] = at
        finally:
            await client.aclose()

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return sent, time.monotonic() - began


# -- a run ---------------------------------------------------------------------------------------
def ms(values: Sequence[float], q: float) -> float:
    return round(percentile(values, q), 2)


def to_agent_ms(fleets: Sequence[Fleet], sent: dict[str, float]) -> list[float]:
    received = {vm: at for f in fleets for vm, at in f.receipts.items() if vm in sent}
    return [(received[vm] - at) * 1000 for vm, at in sent.items() if vm in received]


async def legs(database_url: str, fleets: Sequence[Fleet], sent: dict[str, float]) -> dict[str, dict[str, float]]:
    """Where the way to the agent goes, p50 and p99 ms of each leg (one machine, one clock): ``api``,
    request due to its VM row committed (``created_at``: the transaction's start); ``scheduler``, to
    the placement committed (``scheduled_at``); ``relay``, to the agent taking the command."""
    connection = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        rows = await connection.fetch(
            "SELECT id::text AS id, extract(epoch FROM created_at) AS created, "
            "extract(epoch FROM scheduled_at) AS scheduled FROM vms WHERE id = ANY($1::uuid[])",
            list(sent),
        )
    finally:
        await connection.close()
    received = {vm: at for f in fleets for vm, at in f.receipts.items() if vm in sent}
    found: dict[str, list[float]] = {"api": [], "scheduler": [], "relay": []}
    for row in rows:
        if row["scheduled"] is None or row["id"] not in received:
            continue
        created, scheduled = float(row["created"]), float(row["scheduled"])
        found["api"].append((created - sent[row["id"]]) * 1000)
        found["scheduler"].append((scheduled - created) * 1000)
        found["relay"].append((received[row["id"]] - scheduled) * 1000)
    return {leg: {"p50": ms(values, 50), "p99": ms(values, 99)} for leg, values in found.items()}


async def settle(fleets: Sequence[Fleet], sent: dict[str, float]) -> int:
    return await asyncio.to_thread(wait_received, fleets, sent)


PHASES = ("hop", "lone", "clients32", "open100", "open300", "batch")


async def one_run(
    stack: Stack, fleets: list[Fleet], seconds: float, label: str, phases: Sequence[str] = PHASES
) -> dict[str, Any]:
    load = Load(stack)
    run: dict[str, Any] = {}

    if "hop" in phases:
        run["hop_per_s"] = round(await raw_hop(stack.env["VMSCHED_AMQP_URL"]), 1)
        print(f"  hop: {run['hop_per_s']} messages/s", flush=True)

    if "lone" in phases:
        run["lone"] = await lone(stack, fleets, load, seconds)
        print(f"  lone: {run['lone']}", flush=True)
    if "clients32" in phases:
        run["clients32"] = await clients32(stack, fleets, load, seconds, label)
        print(f"  clients32: {run['clients32']}", flush=True)
    for rate in (100.0, 300.0):
        key = f"open{rate:g}"
        if key in phases:
            run[key] = await open_phase(stack, fleets, load, rate, seconds)
            print(f"  {key}: {run[key]}", flush=True)
    if "batch" in phases:
        run["batch"] = await batch_phase(stack, fleets, load, label, run.get("hop_per_s"))
        print(f"  batch: {run['batch']}", flush=True)
    return run


async def lone(stack: Stack, fleets: list[Fleet], load: Load, seconds: float) -> dict[str, Any]:
    before = scrape_phases(stack.api_url)
    sent, latencies, wall = await closed_loop(load, 1, seconds)
    missing = await settle(fleets, sent)
    return {
        "posts": len(sent),
        "per_s": round(len(sent) / wall, 1),
        "p50_ms": ms(latencies, 50),
        "p99_ms": ms(latencies, 99),
        "to_agent_p50_ms": ms(to_agent_ms(fleets, sent), 50),
        "to_agent_p99_ms": ms(to_agent_ms(fleets, sent), 99),
        "missing": missing,
        "phases": phase_breakdown(before, scrape_phases(stack.api_url)),
        "legs_ms": await legs(stack.env["VMSCHED_DATABASE_URL"], fleets, sent),
    }


async def clients32(stack: Stack, fleets: list[Fleet], load: Load, seconds: float, label: str) -> dict[str, Any]:
    named = component_pids(stack, fleets)
    before = scrape_phases(stack.api_url)
    cpu_before = cpu_times(named)
    with profiled(stack, fleets, f"{label}-clients32"):
        sent, latencies, wall = await closed_loop(load, CLIENTS, seconds)
        missing = await settle(fleets, sent)
    cpu = spent(cpu_before, cpu_times(named))
    received = [at for f in fleets for vm, at in f.receipts.items() if vm in sent]
    return {
        "posts": len(sent),
        "per_s": round(len(sent) / wall, 1),
        "p50_ms": ms(latencies, 50),
        "p99_ms": ms(latencies, 99),
        "placements_per_s": round(sustained_rate(received), 1),
        "missing": missing,
        "cpu_ms_per_vm": per_vm_ms(cpu, len(sent) - missing),
        "phases": phase_breakdown(before, scrape_phases(stack.api_url)),
    }


async def open_phase(stack: Stack, fleets: list[Fleet], load: Load, rate: float, seconds: float) -> dict[str, Any]:
    sent, latencies, wall = await open_loop(load, rate, max(seconds, 15.0))
    missing = await settle(fleets, sent)
    to_agent = to_agent_ms(fleets, sent)
    return {
        "posts": len(sent),
        "offered_per_s": rate,
        "accepted_per_s": round(len(sent) / wall, 1),
        "response_p50_ms": ms(latencies, 50),
        "response_p99_ms": ms(latencies, 99),
        "to_agent_p50_ms": ms(to_agent, 50),
        "to_agent_p99_ms": ms(to_agent, 99),
        "missing": missing,
        "legs_ms": await legs(stack.env["VMSCHED_DATABASE_URL"], fleets, sent),
    }


async def batch_phase(stack: Stack, fleets: list[Fleet], load: Load, label: str, hop: float | None) -> dict[str, Any]:
    named = component_pids(stack, fleets)
    cpu_before = cpu_times(named)
    with profiled(stack, fleets, f"{label}-batch"):
        sent, wall = await batches_flat_out(load, BATCH_VMS)
        missing = await settle(fleets, sent)
    cpu = spent(cpu_before, cpu_times(named))
    received = [at for f in fleets for vm, at in f.receipts.items() if vm in sent]
    placements = sustained_rate(received)
    return {
        "vms": len(sent),
        "accepted_per_s": round(len(sent) / wall, 1),
        "placements_per_s": round(placements, 1),
        "ceiling_per_s": None if hop is None else round(hop / 3, 1),
        "ceiling_ratio": None if hop is None else round(placements / (hop / 3), 3),
        "missing": missing,
        "cpu_ms_per_vm": per_vm_ms(cpu, len(sent) - missing),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of each figure a target names, with the target and its verdict."""

    def med(path: str) -> float | None:
        values = []
        for run in runs:
            value: Any = run
            for key in path.split("."):
                if key not in value or value[key] is None:
                    return None
                value = value[key]
            values.append(float(value))
        return round(median(values), 3)

    def ratio(part: float | None, whole: float | None) -> float | None:
        return None if part is None or not whole else round(part / whole, 3)

    hop = med("hop_per_s")
    figures: dict[str, tuple[float | None, float | None, str | None]]
    figures = {
        "hop_per_s": (hop, None, None),
        "lone_p50_ms": (med("lone.p50_ms"), TARGETS["lone_p50_ms"], "<="),
        "lone_p99_ms": (med("lone.p99_ms"), TARGETS["lone_p99_ms"], "<="),
        "clients32_per_s": (med("clients32.per_s"), TARGETS["clients32_per_s"], ">="),
        "clients32_hop_ratio": (ratio(med("clients32.per_s"), hop), TARGETS["clients32_hop_ratio"], ">="),
        "clients32_p50_ms": (med("clients32.p50_ms"), None, None),
        "clients32_p99_ms": (med("clients32.p99_ms"), None, None),
        "open100_p99_ms": (med("open100.to_agent_p99_ms"), TARGETS["open100_p99_ms"], "<="),
        "open300_p99_ms": (med("open300.to_agent_p99_ms"), TARGETS["open300_p99_ms"], "<="),
        "batch_per_s": (med("batch.placements_per_s"), None, None),
        "batch_ceiling_ratio": (med("batch.ceiling_ratio"), TARGETS["batch_ceiling_ratio"], ">="),
        "batch_cpu_ms": (med("batch.cpu_ms_per_vm.total"), TARGETS["batch_cpu_ms"], "<="),
        "singles_cpu_ms": (med("clients32.cpu_ms_per_vm.total"), TARGETS["singles_cpu_ms"], "<="),
    }
    out = {}
    for name, (value, target, sense) in figures.items():
        if value is None:
            continue
        met = None if target is None else (value <= target if sense == "<=" else value >= target)
        out[name] = {"median": value, "target": target, "sense": sense, "met": met}
    return out


def print_summary(result: dict[str, Any]) -> None:
    print(f"\nmedians of {len(result['runs'])} runs, {result['hosts']} hosts ({result['commit']}):")
    for name, row in result["summary"].items():
        target = "" if row["target"] is None else f"  target {row['sense']} {row['target']:g}"
        verdict = "" if row["met"] is None else ("  met" if row["met"] else "  MISSED")
        print(f"  {name:22} {row['median']:>10g}{target}{verdict}")


def main() -> int:
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the lone and clients32 phases")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"which of {','.join(PHASES)} (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"single-{today}.json")
    options = parser.parse_args()
    phases = [phase for phase in options.phases.split(",") if phase]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        parser.error(f"unknown phase {', '.join(unknown)}; valid: {', '.join(PHASES)}")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="vmsched-single-") as tmp:
        workdir = Path(tmp)
        with (
            isolated() as iso,
            stack_with_fleets(iso, workdir, [("single", options.hosts, "uniform", "", OVERCOMMIT_CPU)]) as (
                stack,
                fleets,
                startup,
            ),
        ):
            print(f"fleet of {options.hosts} ready in {startup:.1f} s", flush=True)

            async def runs() -> list[dict[str, Any]]:
                # Not measured: the pools and caches fill in the first seconds.
                load = Load(stack)
                sent, _, _ = await open_loop(load, 100.0, 3.0)
                await settle(fleets, sent)
                done = []
                for n in range(options.runs):
                    print(f"run {n + 1} of {options.runs}", flush=True)
                    done.append(await one_run(stack, fleets, options.seconds, f"run{n + 1}", phases))
                return done

            all_runs = uvloop.run(runs())
    result = {
        "commit": git_commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "hosts": options.hosts,
        "seconds": options.seconds,
        "wall_s": round(time.time() - started, 1),
        "runs": all_runs,
        "summary": summary(all_runs),
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    print_summary(result)
    print(f"\nsaved {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
