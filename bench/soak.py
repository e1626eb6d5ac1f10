"""The soak: vmsched for an hour (``VMSCHED_SOAK_MINUTES``, 60) under steady churn, watched.

    make soak                                   # 60 minutes
    VMSCHED_SOAK_MINUTES=10 make soak           # a short one (windows of 2 minutes, warm-up 2 minutes)

What runs: the API, one scheduler and the gateway (devtools.Stack) on an own RabbitMQ vhost,
PostgreSQL database and Redis key prefix (removed afterwards), and 1,000 simulated hosts
(``SOAK_HOSTS``) in a process of their own. Then, for the whole run:

- churn: VMs asked for at ``SOAK_RATE`` (50) a second, one ``POST /v1/vms`` each (from
  bench/wire_client.py, which costs the machine next to nothing); once
  ``SOAK_POPULATION`` (3,000) are alive, the oldest deleted at the same rate;
- a live migration every 2 minutes, a host drained (evacuated, then ended) every 5 minutes, a service
  restarted (SIGTERM, then started again: scheduler, gateway, API in turn) every 10 minutes;
- every 10 seconds: each service's resident memory, the depth of every queue and the size of every
  PostgreSQL table; every minute, the memory of the installation's Redis keys; each request's answer
  and time.

It passes when nothing is lost (every VM asked for and accepted ends running or, once deleted,
deleted; the invariants of tests/faults/invariants.py hold), the p99 of time to ``scheduled`` of each
window of steady churn (from when the population is reached) stays within 1.2x of the first one's,
each service's memory stays within 15% of what it used after warm-up, and the tables and Redis stop
growing: over the second half of the run, each table but the history (``vms``, ``audit``,
``decision_journal``, ``host_drains``: one row per VM, request, decision or drain ever, kept by
design) grows by less than 5%, and Redis's keys' memory by less than 5%, with PostgreSQL's autovacuum
on, as in production (turned on for the run when the server has it off, and back off after). It writes the figures over
time to ``docs/img/soak.png`` and its numbers to ``bench/results/soak-<date>.json``; docs/reliability.md
shows the last.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncpg
import httpx
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.e2e.isolation import isolated  # noqa: E402
from bench.e2e_stats import percentile  # noqa: E402
from bench.wire_client import WireClient  # noqa: E402
from devtools.stack import Stack, api_client, free_port, wait_for  # noqa: E402
from tests.faults.invariants import check  # noqa: E402

MINUTES = float(os.environ.get("VMSCHED_SOAK_MINUTES", "60"))
HOSTS = int(os.environ.get("SOAK_HOSTS", "1000"))
RATE = float(os.environ.get("SOAK_RATE", "50"))
POPULATION = int(os.environ.get("SOAK_POPULATION", "3000"))
# Replicas, as production runs them (the scheduler is stateless): a restart of one leaves the others
# taking the queue, so a restart costs no placement latency. SOAK_SCHEDULERS=1 shows what it costs.
SCHEDULERS = int(os.environ.get("SOAK_SCHEDULERS", "2"))
DURATION = MINUTES * 60
WINDOW = 300.0 if MINUTES >= 30 else 120.0
WARM_UP = min(300.0, WINDOW)
SAMPLE_EVERY = 10.0
# Redis's keys are weighed less often: MEMORY USAGE of each of some 10,000 keys took a quarter of a core
# every 10 s, on the machine that runs what it measures.
REDIS_EVERY = 60.0
# A short run (under 30 minutes) drains and restarts more often, so that it still does each a few times.
MIGRATE_EVERY = 120.0 if MINUTES >= 30 else DURATION / 6
DRAIN_EVERY = 300.0 if MINUTES >= 30 else DURATION / 4
RESTART_EVERY = 600.0 if MINUTES >= 30 else DURATION / 3.5
# Requests in flight at most, each way: enough that the rate holds while an answer takes half a second.
SENDERS = 32
# Seconds a churn request may take before it is counted as unanswered.
ANSWER_WITHIN = 60.0
# What a request without an answer raises: the API restarting (refused, or the connection closed
# mid-answer), or no answer in ANSWER_WITHIN.
ANSWERLESS = (OSError, asyncio.IncompleteReadError, TimeoutError)
# One row per VM, request, decision or drain ever (the journal is pruned after VMSCHED_JOURNAL_RETENTION,
# 7 days): they grow with the churn by design.
HISTORY_TABLES = {"vms", "audit", "decision_journal", "host_drains"}
P99_LIMIT = 1.2
MEMORY_LIMIT = 1.15
GROWTH_LIMIT = 1.05
SETTLE_WITHIN = 180.0


@dataclass
class Sample:
    at: float  # seconds since the churn began
    rss_mb: dict[str, float]
    cpu_s: dict[str, float]  # CPU seconds each process has used (the soak's own as "soak")
    pids: dict[str, int]
    queues: dict[str, int]
    tables_mb: dict[str, float]
    # Weighed every REDIS_EVERY seconds, None in the samples between.
    redis_mb: float | None
    redis_keys: int | None
    redis_kinds: dict[str, int] | None  # keys by what follows the prefix (claim, host, ...)


@dataclass
class Run:
    accepted: list[str] = field(default_factory=list)
    alive: collections.deque[str] = field(default_factory=collections.deque)
    answers: collections.Counter[str] = field(default_factory=collections.Counter)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (at, seconds) of each POST
    samples: list[Sample] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    began: float = field(default_factory=time.monotonic)
    steady_at: float | None = None  # seconds into the run when the population was reached

    def now(self) -> float:
        return time.monotonic() - self.began

    def note(self, what: str) -> None:
        self.events.append((self.now(), what))
        print(f"[{self.now():7.0f} s] {what}", flush=True)


# -- churn ---------------------------------------------------------------------------------------
def vm_body(rng: random.Random, index: int) -> dict[str, Any]:
    return {
        "name": f"soak-{index}",
        "cpu": rng.choice([1, 1, 2]),
        "memory_mb": rng.choice([512, 1024, 2048]),
        "disk_gb": rng.choice([5, 10, 20]),
    }


async def create_forever(api: WireClient, run: Run, deadline: float, counter: itertools.count[int]) -> None:
    rng = random.Random(next(counter))
    interval = SENDERS / RATE
    next_at = time.monotonic()
    while time.monotonic() < deadline:
        index = next(counter)
        started = time.monotonic()
        try:
            body = json.dumps(vm_body(rng, index)).encode()
            response = await asyncio.wait_for(api.post("/v1/vms", body), ANSWER_WITHIN)
            run.answers[f"POST {response.status}"] += 1
            if response.status == 202:
                vm_id = response.json()["id"]
                run.accepted.append(vm_id)
                run.alive.append(vm_id)
            run.latencies.append((run.now(), time.monotonic() - started))
        except ANSWERLESS as error:  # a restart of the API: counted, not retried
            run.answers[f"POST {type(error).__name__}"] += 1
            await api.aclose()
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def delete_forever(api: WireClient, run: Run, deadline: float) -> None:
    interval = SENDERS / RATE
    next_at = time.monotonic()
    while time.monotonic() < deadline:
        if len(run.alive) > POPULATION:
            if run.steady_at is None:
                run.steady_at = run.now()
                run.note(f"{POPULATION} VMs alive: deletes begin, the churn is steady")
            vm_id = run.alive.popleft()
            try:
                response = await asyncio.wait_for(api.delete(f"/v1/vms/{vm_id}"), ANSWER_WITHIN)
                run.answers[f"DELETE {response.status}"] += 1
                if response.status not in (202, 409):
                    run.alive.append(vm_id)
            except ANSWERLESS as error:
                run.answers[f"DELETE {type(error).__name__}"] += 1
                run.alive.append(vm_id)
                await api.aclose()
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def disturb_forever(api: httpx.AsyncClient, stack: Stack, run: Run, deadline: float) -> None:
    """A migration every MIGRATE_EVERY, a drain every DRAIN_EVERY, a restart every RESTART_EVERY."""
    rng = random.Random(7)
    restarts = itertools.cycle(
        [name for n in range(1, SCHEDULERS + 1) for name in (f"scheduler-{n}", "gateway" if n % 2 else "api")]
        if SCHEDULERS > 1
        else ["scheduler-1", "gateway", "api"]
    )
    due = {"migrate": MIGRATE_EVERY, "drain": DRAIN_EVERY, "restart": RESTART_EVERY}
    drained: str | None = None
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        at = run.now()
        try:
            if at >= due["migrate"] and len(run.alive) > 100:
                due["migrate"] += MIGRATE_EVERY
                vm_id = run.alive[rng.randrange(len(run.alive) // 2)]
                response = await api.post(f"/v1/vms/{vm_id}/migrate")
                run.note(f"migrate {vm_id}: {response.status_code}")
            if drained is not None and at >= due["drain"] - DRAIN_EVERY / 2:
                response = await api.delete(f"/v1/hosts/{drained}/drain")
                run.note(f"drain of {drained} ended: {response.status_code}")
                drained = None
            if at >= due["drain"]:
                due["drain"] += DRAIN_EVERY
                drained = f"soak-{rng.randrange(1, HOSTS + 1):04d}"
                body = {"evacuate": True, "max_parallel": 4, "deadline_s": 120}
                response = await api.post(f"/v1/hosts/{drained}/drain", json=body)
                run.note(f"drain {drained}: {response.status_code}")
            if at >= due["restart"]:
                due["restart"] += RESTART_EVERY
                await asyncio.to_thread(restart, stack, next(restarts), run)
        except httpx.HTTPError as error:
            run.note(f"disturbance failed: {error!r}")


async def progress_forever(run: Run, deadline: float) -> None:
    """A line a minute: the rates reached each way and the answers' latency, to watch a long run."""
    seen: collections.Counter[str] = collections.Counter()
    while time.monotonic() < deadline:
        await asyncio.sleep(60.0)
        now = run.now()
        done = run.answers - seen
        seen = collections.Counter(run.answers)
        took = [t * 1000 for at, t in run.latencies if at >= now - 60]
        latency = f"POST p50 {percentile(took, 50):.0f} ms, p99 {percentile(took, 99):.0f} ms" if took else "no POST"
        used = ", ".join(f"{name} {n:.2f}" for name, n in sorted(cores(run, 60).items(), key=lambda kv: -kv[1]))
        print(
            f"[{now:7.0f} s] {done['POST 202'] / 60:.1f} creates/s, {done['DELETE 202'] / 60:.1f} deletes/s, "
            f"{len(run.alive)} alive; {latency}; cores: {used}",
            flush=True,
        )


def restart(stack: Stack, name: str, run: Run) -> None:
    run.note(f"restart {name}")
    old = stack.services[name]
    readied = old.log_path.read_text(errors="replace").count(old.ready_line) if old.ready_line else 0
    old.stop()
    starts = {"api": stack.start_api, "gateway": stack.start_gateway}
    service = starts.get(name, lambda: stack.start_scheduler(int(name.rsplit("-", 1)[1])))()

    def ready_again() -> bool:
        # The log is appended to: the new process's ready line is one more than the old one wrote.
        if service.ready_line is None:
            return service.is_ready()
        service.check_alive()
        return service.log_path.read_text(errors="replace").count(service.ready_line) > readied

    wait_for(ready_again, 120, f"{name} ready again", interval=0.2)
    run.note(f"{name} ready again")


# -- watching ------------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User and system CPU time ``pid`` has used, in seconds (proc(5): fields 14 and 15 of stat)."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


def cores(run: Run, over: float) -> dict[str, float]:
    """Cores each process used over the last ``over`` seconds of samples (a service restarted
    meanwhile counted for its processes' time, not the gap between them)."""
    if not run.samples:
        return {}
    samples = [s for s in run.samples if s.at >= run.samples[-1].at - over]
    used: dict[str, float] = collections.defaultdict(float)
    for before, after in itertools.pairwise(samples):
        for name, seconds in after.cpu_s.items():
            if name in before.cpu_s and before.pids.get(name) == after.pids.get(name):
                used[name] += seconds - before.cpu_s[name]
    span = samples[-1].at - samples[0].at
    return {name: seconds / span for name, seconds in used.items()} if span > 0 else {}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def queue_depths(amqp_url: str) -> dict[str, int]:
    parts = urlsplit(amqp_url)
    vhost = unquote(parts.path[1:]) or "/"
    auth = (unquote(parts.username or "guest"), unquote(parts.password or "guest"))
    async with httpx.AsyncClient(auth=auth, timeout=10) as client:
        response = await client.get(f"http://{parts.hostname}:15672/api/queues/{vhost.replace('/', '%2F')}")
    depths: dict[str, int] = collections.Counter()
    for queue in response.json():
        name = "agent.*" if queue["name"].startswith("agent.") else queue["name"]
        depths[name] += int(queue.get("messages", 0) or 0)
    return dict(depths)


async def table_sizes(dsn: str) -> dict[str, float]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT relname, pg_total_relation_size(relid) AS bytes FROM pg_stat_user_tables ORDER BY relname"
        )
    finally:
        await conn.close()
    return {row["relname"]: row["bytes"] / 2**20 for row in rows}


async def redis_usage(redis_url: str, prefix: str) -> tuple[float, int, dict[str, int]]:
    """The installation's keys: their memory (MEMORY USAGE of each, in MiB), how many, and how many
    of each kind (the word after the prefix)."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=5000)]
        kinds = collections.Counter(key.decode(errors="replace")[len(prefix) + 1 :].split(":")[0] for key in keys)
        total = 0
        for start in range(0, len(keys), 500):
            pipe = client.pipeline(transaction=False)
            for key in keys[start : start + 500]:
                pipe.memory_usage(key)
            total += sum(int(n or 0) for n in await pipe.execute())
        return total / 2**20, len(keys), dict(kinds)
    finally:
        await client.aclose()


async def sample_forever(stack: Stack, env: dict[str, str], dsn: str, run: Run, deadline: float) -> None:
    weighed_at = -REDIS_EVERY
    while time.monotonic() < deadline:
        pids = {name: service.pid for name, service in stack.services.items() if service.process is not None}
        pids["soak"] = os.getpid()
        try:
            redis_mb: float | None = None
            redis_keys: int | None = None
            redis_kinds: dict[str, int] | None = None
            if run.now() - weighed_at >= REDIS_EVERY:
                weighed_at = run.now()
                redis_mb, redis_keys, redis_kinds = await redis_usage(
                    env["VMSCHED_REDIS_URL"], env["VMSCHED_REDIS_KEY_PREFIX"]
                )
            run.samples.append(
                Sample(
                    at=run.now(),
                    rss_mb={name: rss_mb(pid) for name, pid in pids.items()},
                    cpu_s={name: cpu_seconds(pid) for name, pid in pids.items()},
                    pids=pids,
                    queues=await queue_depths(env["VMSCHED_AMQP_URL"]),
                    tables_mb=await table_sizes(dsn),
                    redis_mb=redis_mb,
                    redis_keys=redis_keys,
                    redis_kinds=redis_kinds,
                )
            )
        except (OSError, httpx.HTTPError, asyncpg.PostgresError) as error:  # a restart in progress
            run.note(f"sample skipped: {error!r}")
        await asyncio.sleep(SAMPLE_EVERY)


# -- the verdict ---------------------------------------------------------------------------------
# Seconds of the finer p99s, kept in the result to see what a restart, a drain or a migration costs.
FINE = 30.0


@dataclass(frozen=True, slots=True)
class Placements:
    p99s: list[float]  # per full WINDOW of steady churn, in ms
    fine: list[tuple[float, float, int]]  # per FINE seconds of the run: (start, p99 in ms, VMs)


async def placement_p99s(dsn: str, run: Run, began_at: datetime) -> Placements:
    """p99 of created -> scheduled, in ms, per full WINDOW of steady churn: from when the population
    was reached and deletes began (before that the first minute only creates, on a lighter machine);
    and per FINE seconds of the whole run."""
    steady = run.steady_at or 0.0
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT extract(epoch FROM created_at - $1) AS at, extract(epoch FROM scheduled_at - created_at) AS took "
            "FROM vms WHERE id = ANY($2::uuid[]) AND scheduled_at IS NOT NULL",
            began_at,
            run.accepted,
        )
    finally:
        await conn.close()
    windows: dict[int, list[float]] = collections.defaultdict(list)
    buckets: dict[int, list[float]] = collections.defaultdict(list)
    for row in rows:
        took = float(row["took"]) * 1000
        buckets[int(float(row["at"]) // FINE)].append(took)
        at = float(row["at"]) - steady
        if at >= 0:
            windows[int(at // WINDOW)].append(took)
    full = int((DURATION - steady) // WINDOW)
    return Placements(
        [percentile(windows[w], 99) for w in range(full) if windows[w]],
        [(b * FINE, round(percentile(buckets[b], 99), 1), len(buckets[b])) for b in sorted(buckets)],
    )


def memory_growth(run: Run) -> dict[str, float]:
    """Per service, the largest ratio of its memory to what it used once warmed up (per process:
    a restarted service warms up again)."""
    growth: dict[str, float] = {}
    started: dict[tuple[str, int], float] = {}
    baseline: dict[tuple[str, int], float] = {}
    for sample in run.samples:
        for name, pid in sample.pids.items():
            key = (name, pid)
            started.setdefault(key, sample.at)
            if sample.at < started[key] + WARM_UP or name not in sample.rss_mb:
                continue
            base = baseline.setdefault(key, sample.rss_mb[name])
            growth[name] = max(growth.get(name, 0.0), sample.rss_mb[name] / base)
    return growth


def second_half_growth(run: Run) -> dict[str, float]:
    """Per table (and ``redis``), its size at the end over its size halfway through."""
    half = [s for s in run.samples if s.at >= DURATION / 2]
    if len(half) < 2:
        return {}
    first, last = half[0], half[-1]
    growth = {
        table: last.tables_mb[table] / size
        for table, size in first.tables_mb.items()
        if size and table in last.tables_mb
    }
    weighed = [s.redis_mb for s in half if s.redis_mb is not None]
    if len(weighed) >= 2 and weighed[0]:
        growth["redis"] = weighed[-1] / weighed[0]
    return growth


def draw(run: Run, p99s: Sequence[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s.at / 60 for s in run.samples]
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    per_minute: dict[int, list[float]] = collections.defaultdict(list)
    for at, took in run.latencies:
        per_minute[int(at // 60)].append(took * 1000)
    marks = sorted(per_minute)
    axes[0][0].plot(marks, [percentile(per_minute[m], 99) for m in marks], label="POST /v1/vms p99")
    axes[0][0].plot(marks, [percentile(per_minute[m], 50) for m in marks], label="POST /v1/vms p50")
    steady = run.steady_at or 0.0
    windows = [(steady + w * WINDOW) / 60 for w in range(len(p99s))]
    axes[0][0].step(windows, p99s, where="post", label="to scheduled p99 (window)")
    axes[0][0].set(title="latency (ms)", xlabel="minutes", yscale="log")
    for name in sorted({n for s in run.samples for n in s.rss_mb}):
        axes[0][1].plot(minutes, [s.rss_mb.get(name, float("nan")) for s in run.samples], label=name)
    axes[0][1].set(title="resident memory (MiB)", xlabel="minutes")
    for name in sorted({n for s in run.samples for n in s.queues}):
        axes[1][0].plot(minutes, [s.queues.get(name, 0) for s in run.samples], label=name)
    axes[1][0].set(title="queue depth (messages)", xlabel="minutes")
    tables = sorted({t for s in run.samples for t in s.tables_mb}, key=lambda t: -run.samples[-1].tables_mb.get(t, 0))
    for table in tables[:5]:
        axes[1][1].plot(minutes, [s.tables_mb.get(table, float("nan")) for s in run.samples], label=f"pg {table}")
    weighed = [s for s in run.samples if s.redis_mb is not None]
    axes[1][1].plot([s.at / 60 for s in weighed], [s.redis_mb for s in weighed], label="redis keys", linestyle="--")
    axes[1][1].set(title="storage (MiB)", xlabel="minutes")
    for axis in itertools.chain(*axes):
        axis.legend(fontsize=7)
        for at, what in run.events:
            if what.startswith("restart"):
                axis.axvline(at / 60, color="grey", linewidth=0.5)
    figure.suptitle(f"vmsched soak: {MINUTES:g} min, {HOSTS} hosts, {RATE:g} creates/s and deletes/s")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)


async def settle(dsn: str, vm_ids: list[str]) -> int:
    deadline = time.monotonic() + SETTLE_WITHIN
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            left: int = await conn.fetchval(
                "SELECT count(*) FROM vms WHERE id = ANY($1::uuid[]) AND status NOT IN ('running', 'deleted')", vm_ids
            )
            if left == 0 or time.monotonic() > deadline:
                return left
            await asyncio.sleep(2)
    finally:
        await conn.close()


def _server_dsn(env: dict[str, str]) -> str:
    """The run's server, through its ``postgres`` database (the run's own is made by the API)."""
    url = urlsplit(_plain_dsn(env))
    return url._replace(path="/postgres").geturl()


def _plain_dsn(env: dict[str, str]) -> str:
    return env["VMSCHED_DATABASE_URL"].replace("postgresql+asyncpg://", "postgresql://", 1)


async def soak(stack: Stack, env: dict[str, str]) -> dict[str, Any]:
    dsn = _plain_dsn(env)
    run = Run()
    began_at = datetime.now(UTC)
    deadline = time.monotonic() + DURATION
    counter = itertools.count()
    # The churn on the load generator's cheap client, one keep-alive connection per sender: httpx
    # spent most of this process's CPU in its connection pool (a core, on the machine it measures).
    address = urlsplit(stack.api_url)
    host, port = address.hostname or "127.0.0.1", address.port or 80
    creators = [WireClient(host, port, stack.token) for _ in range(SENDERS)]
    deleters = [WireClient(host, port, stack.token) for _ in range(SENDERS)]
    async with api_client(stack.api_url, stack.token, timeout=60) as api:
        await asyncio.gather(
            *(create_forever(client, run, deadline, counter) for client in creators),
            *(delete_forever(client, run, deadline) for client in deleters),
            disturb_forever(api, stack, run, deadline),
            progress_forever(run, deadline),
            sample_forever(stack, env, dsn, run, deadline),
        )
    for client in creators + deleters:
        await client.aclose()
    run.note("churn over; settling")
    left = await settle(dsn, run.accepted)
    report = await check(dsn, run.accepted)
    placements = await placement_p99s(dsn, run, began_at)
    p99s = placements.p99s
    memory = memory_growth(run)
    growth = second_half_growth(run)
    draw(run, p99s, ROOT / "docs" / "img" / "soak.png")
    failures = []
    if left or report.problems:
        failures.append(f"not settled: {left}; problems: {report.problems[:5]}")
    if set(report.by_status) - {"running", "deleted"}:
        failures.append(f"VMs neither running nor deleted: {report.by_status}")
    if p99s and any(p > P99_LIMIT * p99s[0] for p in p99s[1:]):
        failures.append(f"p99 to scheduled past {P99_LIMIT}x the first window's: {[round(p) for p in p99s]}")
    failures += [
        f"{name} memory grew {ratio:.2f}x"
        for name, ratio in memory.items()
        if ratio > MEMORY_LIMIT and name not in ("agents", "soak")  # the fleet and the load are the harness
    ]
    failures += [
        f"{name} grew {ratio:.2f}x over the second half"
        for name, ratio in growth.items()
        if ratio > GROWTH_LIMIT and name not in HISTORY_TABLES
    ]
    return {
        "date": began_at.isoformat(timespec="seconds"),
        "command": f"VMSCHED_SOAK_MINUTES={MINUTES:g} make soak",
        "minutes": MINUTES,
        "hosts": HOSTS,
        "rate": RATE,
        "accepted": len(run.accepted),
        "by_status": report.by_status,
        "answers": dict(run.answers),
        "p99_to_scheduled_ms_per_window": [round(p, 1) for p in p99s],
        "p99_to_scheduled_ms_per_30s": placements.fine,
        "post_p99_ms": round(percentile([t * 1000 for _, t in run.latencies], 99), 1),
        "memory_growth": {k: round(v, 3) for k, v in memory.items()},
        "cores_per_process": {k: round(v, 2) for k, v in cores(run, DURATION).items()},
        "second_half_growth": {k: round(v, 3) for k, v in growth.items()},
        "redis_keys_by_kind": {
            "halfway": next((s.redis_kinds for s in run.samples if s.at >= DURATION / 2 and s.redis_kinds), {}),
            "end": next((s.redis_kinds for s in reversed(run.samples) if s.redis_kinds), {}),
        },
        "events": run.events,
        "samples": [asdict(s) for s in run.samples],
        "failures": failures,
        "passed": not failures,
    }


@contextlib.contextmanager
def autovacuum_on(dsn: str) -> Iterator[str]:
    """PostgreSQL's autovacuum on for the run, as in production (the tables rule means nothing
    without it), and the server's own setting back afterwards. This machine's test server has it off
    (/etc/postgresql/15/main/conf.d/90-ci.conf), which every soak before 2026-11-28 ran with.
    Yields what the run had: "on", "on (turned on for the run)", or why it is off."""

    async def ask(*statements: str) -> str:
        conn = await asyncpg.connect(dsn)
        try:
            for statement in statements:
                await conn.execute(statement)
            return str(await conn.fetchval("SHOW autovacuum"))
        finally:
            await conn.close()

    if asyncio.run(ask()) == "on":
        yield "on"
        return
    try:
        turned = asyncio.run(ask("ALTER SYSTEM SET autovacuum = on", "SELECT pg_reload_conf()"))
        # The server reloads its configuration in a moment, not before pg_reload_conf() returns.
        deadline = time.monotonic() + 10
        while turned != "on" and time.monotonic() < deadline:
            time.sleep(0.2)
            turned = asyncio.run(ask())
    except asyncpg.PostgresError as error:  # not a superuser: said in the result, the tables rule unjudged
        yield f"off ({error}; run ALTER SYSTEM SET autovacuum = on as a superuser first)"
        return
    try:
        yield "on (turned on for the run)" if turned == "on" else f"off (still {turned} after ALTER SYSTEM)"
    finally:
        asyncio.run(ask("ALTER SYSTEM RESET autovacuum", "SELECT pg_reload_conf()"))


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="vmsched-soak-"))
    print(f"soak: {MINUTES:g} min, {HOSTS} hosts, {RATE:g}/s; logs in {workdir}", flush=True)
    with isolated(VMSCHED_REPUBLISH_AFTER="5") as iso, autovacuum_on(_server_dsn(iso.env)) as autovacuum:
        print(f"PostgreSQL's autovacuum: {autovacuum}", flush=True)
        stack = Stack(env={**iso.env, "VMSCHED_RATE_LIMIT": "0"}, log_dir=workdir, api_port=free_port())
        with stack.running(schedulers=SCHEDULERS):
            stack.start_agents(
                "agents", "--count", str(HOSTS), "--prefix", "soak", "--cpu", "64", "--memory-mb", "262144",
                "--disk-gb", "4000", "--heartbeat-interval", "10",
            )  # fmt: skip
            wait_for(lambda: hosts_online(stack) >= HOSTS, 600, f"{HOSTS} hosts online", interval=2)
            result = asyncio.run(soak(stack, iso.env))
            result["autovacuum"] = autovacuum
            if not autovacuum.startswith("on"):
                result["failures"].append(f"the tables rule needs autovacuum on: {autovacuum}")
                result["passed"] = False
    out = ROOT / "bench" / "results" / f"soak-{result['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    summary = {k: v for k, v in result.items() if k not in ("samples", "events")}
    print(json.dumps(summary, indent=1, default=str))
    print(f"figures: docs/img/soak.png; numbers: {out.relative_to(ROOT)}")
    return 0 if result["passed"] else 1


def hosts_online(stack: Stack) -> int:
    with stack.client(timeout=30) as client:
        return sum(1 for host in client.get("/v1/hosts").json() if host["status"] == "online")


if __name__ == "__main__":
    raise SystemExit(main())
