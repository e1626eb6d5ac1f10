"""End-to-end benchmark: the real services on the local servers, a simulated fleet, a load generator.

    python bench/e2e_bench.py            # what `make bench` runs (about 6 minutes)
    BENCH_QUICK=1 python bench/e2e_bench.py            # one short run per fleet size (about 2 minutes)
    BENCH_HOSTS=1000 BENCH_RUNS=1 python bench/e2e_bench.py --out /tmp/x.json

What runs (docs/performance.md has the why): API, 2 scheduler replicas and the gateway (devtools.Stack),
and the fleet in a process of its own (bench/e2e_fleet.py), all against an own RabbitMQ vhost, own
PostgreSQL database and own Redis key prefix, removed afterwards. For each fleet size, on one stack:

- latency: single ``POST /v1/vms`` at a fixed offered rate (100/s): how long from the request to
  ``scheduled`` (p99, the target) and to the agent (after 3 s of the same, not measured, once per
  stack: the services' pools and caches fill);
- sweep: ``POST /v1/vms/batch`` at rising offered rates, then as fast as the API takes them
  (saturation: the sustained placements/s, and CPU per placement per component);
- messages: broker messages per VM, counted by a tap on the ``vmsched`` exchange while batches and
  single POSTs go through (and the agents' commands, one each);

and, with the broker floor ``bench/broker_floor.py`` saved (``make bench`` runs it first), the
ratio of the placements/s achieved to the ceiling RabbitMQ alone would set for the messages a
placement costs.

end to end means from the moment the load generator sends the request to the moment the agent takes
the create command off its queue (both clocks are this machine's). Then, from PostgreSQL, each
placement's decision time and claim conflicts (kept in its decision record), and from /proc the
schedulers' peak RSS. Separately, on a fleet without overcommit: filling it to 80% with mixed-size
VMs (claim conflicts under contention), and packing (best_fit against the lower bound, least_loaded's
spread), each on its own pool of identical hosts. Last, placements beside 10,000 waiting VMs: the
latency phase and saturation (while the latency phase's VMs are deleted, so capacity is released all
along) with none waiting, then again with 10,000 waiting in 100 shapes (issue 13: at most 10%
slower); ``--waiting-only`` runs just that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import httpx
import redis
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cpu_account import cores_busy, cpu_times, per_vm_ms, spent  # noqa: E402
from bench.e2e_fleet import UNIFORM_CAPACITY  # noqa: E402
from bench.e2e_stats import (  # noqa: E402
    hosts_lower_bound,
    median,
    percentile,
    sustained_rate,
    utilisation_spread,
)
from devtools.stack import Stack, api_client, wait_for  # noqa: E402
from vmsched_agent import Profile, generate_hosts  # noqa: E402

BASE_AMQP = os.environ.get("VMSCHED_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
BASE_REDIS = os.environ.get("VMSCHED_REDIS_URL", "redis://127.0.0.1:6379/0")
BASE_DB = os.environ.get("VMSCHED_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/vmsched")
HEARTBEAT_INTERVAL = 30.0
SCHEDULERS = 2
LATENCY_RATE = 100.0
WARM_UP_SECONDS = 3.0
SATURATED = 0.8  # achieved below this share of offered: the sweep stops
# A throughput VM is small: the fleets are overcommitted (cpu x4) so that every run fits in them.
SMALL_VM = {"cpu": 1, "memory_mb": 512, "disk_gb": 1}
THROUGHPUT_OVERCOMMIT_CPU = 4.0
IDLE_SECONDS = 30.0  # one heartbeat period: every host beats once in the window
STALL_TIMEOUT = 30.0  # no command received for this long: the rest is lost, not late
DRAIN_LIMIT = 900.0

# What issue 12 asks of the core, per fleet size where it depends on it.
THROUGHPUT_TARGETS = {1000: 1500.0, 10000: 1200.0}
SCHEDULER_CPU_MS_TARGET = 1.5
MESSAGES_PER_VM_TARGET = 2.0
P99_TO_SCHEDULED_MS_TARGET = 100.0


@dataclass(frozen=True)
class Plan:
    hosts: list[int]
    runs: int
    latency_seconds: float
    sweep_rates: list[float]
    step_seconds: float
    saturation_vms: int
    fill_hosts: int
    pack_hosts: int


def plan_from_env() -> Plan:
    quick = os.environ.get("BENCH_QUICK") == "1"
    hosts = [int(h) for h in os.environ.get("BENCH_HOSTS", "1000,10000").split(",") if h]
    runs = int(os.environ.get("BENCH_RUNS", "1" if quick else "3"))
    return Plan(
        hosts=hosts,
        runs=runs,
        latency_seconds=5.0 if quick else 10.0,
        sweep_rates=[500.0, 1000.0, 2000.0] if quick else [500.0, 1000.0, 1500.0, 2000.0],
        step_seconds=3.0 if quick else 5.0,
        saturation_vms=6000 if quick else 12000,
        fill_hosts=int(os.environ.get("BENCH_FILL_HOSTS", "1000")),
        pack_hosts=int(os.environ.get("BENCH_PACK_HOSTS", "100")),
    )


# -- isolation on the local servers --------------------------------------------------------------
@dataclass
class Isolated:
    env: dict[str, str]
    database: str
    prefix: str


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


async def _drop_database(database: str) -> None:
    parts = urlsplit(BASE_DB.replace("postgresql+asyncpg://", "postgresql://", 1))
    conn = await asyncpg.connect(
        host=parts.hostname, port=parts.port or 5432, user=parts.username or "postgres", database="postgres"
    )
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        await conn.close()


@contextlib.contextmanager
def isolated(**env: str) -> Iterator[Isolated]:
    """An own vhost, database and Redis key prefix (as tests/servers.py), removed afterwards."""
    run_id = uuid.uuid4().hex[:10]
    vhost, database, prefix = f"vmsched-bench-{run_id}", f"vmsched_bench_{run_id}", f"vmsched-bench-{run_id}"
    _rabbitmqctl("add_vhost", vhost)
    _rabbitmqctl("set_permissions", "-p", vhost, urlsplit(BASE_AMQP).username or "guest", ".*", ".*", ".*")
    amqp = urlsplit(BASE_AMQP)
    db = urlsplit(BASE_DB)
    full_env = {
        "VMSCHED_AMQP_URL": urlunsplit((amqp.scheme, amqp.netloc, "/" + quote(vhost, safe=""), "", "")),
        "VMSCHED_REDIS_URL": BASE_REDIS,
        "VMSCHED_DATABASE_URL": urlunsplit((db.scheme, db.netloc, "/" + database, "", "")),
        "VMSCHED_REDIS_KEY_PREFIX": prefix,
        # INFO, as operators run it (and the services' readiness lines are INFO).
        "VMSCHED_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "INFO"),
        "VMSCHED_AGENT_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL),
        "VMSCHED_AGENT_OFFLINE_TIMEOUT": str(HEARTBEAT_INTERVAL * 3),
        # Thousands of simulated hosts share one connection as the services' user, which only a gateway
        # that takes any user's word accepts (docs/security.md): a broker user and connection per host
        # would measure the fleet process, not vmsched.
        "VMSCHED_AGENT_AUTH": "off",
        **env,
    }
    try:
        yield Isolated(full_env, database, prefix)
    finally:
        with contextlib.suppress(Exception):
            _rabbitmqctl("delete_vhost", vhost)
        with contextlib.suppress(Exception):
            asyncio.run(_drop_database(database))
        with contextlib.suppress(Exception):
            client = redis.Redis.from_url(BASE_REDIS)
            keys = list(client.scan_iter(match=f"{prefix}:*", count=5000))
            for start in range(0, len(keys), 1000):
                client.delete(*keys[start : start + 1000])


# -- the fleet process and its receipts ----------------------------------------------------------
@dataclass
class Fleet:
    """One e2e_fleet.py process and the receipts it writes, tailed by a thread."""

    process: subprocess.Popen[bytes]
    receipts_path: Path
    count: int
    receipts: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def start(
        cls,
        env: dict[str, str],
        workdir: Path,
        name: str,
        count: int,
        profile: str,
        labels: str = "",
        overcommit: float = 1.0,
    ) -> Fleet:
        path = workdir / f"{name}.receipts"
        argv = [
            sys.executable,
            str(ROOT / "bench" / "e2e_fleet.py"),
            f"--count={count}",
            f"--receipts={path}",
            f"--prefix={name}",
            f"--profile={profile}",
            f"--heartbeat-interval={HEARTBEAT_INTERVAL}",
            f"--overcommit-cpu={overcommit}",
        ]
        if labels:
            argv.append(f"--labels={labels}")
        log = (workdir / f"{name}.log").open("ab")
        process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        return cls(process, path, count)

    def wait_ready(self, timeout: float) -> float:
        ready = Path(f"{self.receipts_path}.ready")

        def is_ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"fleet process exited with {self.process.returncode}")
            return ready.exists()

        wait_for(is_ready, timeout, f"{self.count} simulated hosts", interval=0.2)
        self._thread = threading.Thread(target=self._tail, daemon=True)
        self._thread.start()
        return float(ready.read_text())

    def _tail(self) -> None:
        with self.receipts_path.open() as source:
            pending = ""
            while not self._stop.is_set():
                chunk = source.read()
                if not chunk:
                    time.sleep(0.02)
                    continue
                lines = (pending + chunk).split("\n")
                pending = lines.pop()
                for line in lines:
                    vm_id, _, at = line.split(" ")
                    self.receipts.setdefault(vm_id, float(at))

    def stop(self) -> None:
        self._stop.set()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


# -- load ----------------------------------------------------------------------------------------
SENDERS = 64  # requests in flight at most, one connection each


@dataclass
class Phase:
    name: str
    offered_per_s: float | None  # None: as fast as the API takes them
    batch: int
    sent: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def vm_body(index: int, size: dict[str, int] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": f"b{index}", **(size or SMALL_VM), **extra}


async def post_batch(
    client: httpx.AsyncClient, bodies: list[dict[str, Any]], phase: Phase, sent_at: float | None = None
) -> None:
    """``sent_at``: when the request was due (wall clock); latency counts from then."""
    sent_at = time.time() if sent_at is None else sent_at
    if len(bodies) == 1:
        response = await client.post("/v1/vms", json=bodies[0])
        response.raise_for_status()
        phase.sent[response.json()["id"]] = sent_at
        return
    response = await client.post("/v1/vms/batch", json={"vms": bodies})
    response.raise_for_status()
    for item in response.json()["items"]:
        phase.sent[item["id"]] = sent_at


class Senders:
    """The load generator's connections: one httpx client per connection, each used by one sender
    at a time. A shared client's pool costs O(connections) per request in httpcore's bookkeeping,
    which at 64 connections took more CPU than the API it was measuring. A connection idle for
    longer than the API's keep-alive (uvicorn: 5 s) is replaced before use: reusing it races the
    server closing it."""

    IDLE_LIMIT = 3.0

    def __init__(self, stack: Stack, count: int = SENDERS) -> None:
        self.base_url = stack.api_url
        self.token = stack.token
        self.clients = [self._client() for _ in range(count)]
        self.last_used = [time.monotonic()] * count

    def _client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        return api_client(self.base_url, self.token, timeout=60, limits=limits)

    async def get(self, n: int) -> httpx.AsyncClient:
        if time.monotonic() - self.last_used[n] > self.IDLE_LIMIT:
            await self.clients[n].aclose()
            self.clients[n] = self._client()
        self.last_used[n] = time.monotonic()
        return self.clients[n]

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self.clients))


async def paced(senders: Senders, phase: Phase, rate: float, seconds: float, batch: int) -> None:
    """Send ``rate`` VMs/s for ``seconds`` in requests of ``batch`` VMs, on a fixed schedule.

    An open loop without coordinated omission: each request's latency counts from the moment it was
    due, so a slow answer that delays the next request is charged to that request. A fixed set of
    senders takes the due requests in order (a task per request would leave thousands waiting for
    a connection)."""
    requests = int(rate * seconds / batch)
    began = time.monotonic()
    wall = time.time()
    due = iter(range(requests))

    async def sender(k: int) -> None:
        for n in due:
            offset = n * batch / rate
            delay = began + offset - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            bodies = [vm_body(n * batch + i) for i in range(batch)]
            await post_batch(await senders.get(k), bodies, phase, sent_at=wall + offset)

    await asyncio.gather(*(sender(k) for k in range(len(senders.clients))))
    phase.seconds = time.monotonic() - began


async def flat_out(senders: Senders, phase: Phase, total: int, batch: int, in_flight: int = 3) -> None:
    """Send ``total`` VMs as fast as the API accepts them, ``in_flight`` batch requests at a time."""
    began = time.monotonic()
    queue = list(range(0, total, batch))

    async def worker(k: int) -> None:
        while queue:
            start = queue.pop(0)
            await post_batch(await senders.get(k), [vm_body(start + i) for i in range(batch)], phase)

    await asyncio.gather(*(worker(k) for k in range(in_flight)))
    phase.seconds = time.monotonic() - began


def wait_received(fleets: Sequence[Fleet], sent: dict[str, float], stall: float = STALL_TIMEOUT) -> int:
    """Wait until every sent VM's command was received, or until none arrived for ``stall`` seconds
    (or DRAIN_LIMIT passed); the number still missing. A phase starts only once the one before has
    drained, so that no phase measures another's backlog."""
    began = last_progress = time.monotonic()
    missing = len(sent)
    while time.monotonic() - began < DRAIN_LIMIT:
        now_missing = sum(1 for vm in sent if not any(vm in f.receipts for f in fleets))
        if now_missing == 0:
            return 0
        if now_missing < missing:
            missing, last_progress = now_missing, time.monotonic()
        elif time.monotonic() - last_progress > stall:
            break
        time.sleep(0.2)
    return sum(1 for vm in sent if not any(vm in f.receipts for f in fleets))


def summarise(phase: Phase, fleets: Sequence[Fleet], missing: int) -> dict[str, Any]:
    received = {vm: at for f in fleets for vm, at in f.receipts.items() if vm in phase.sent}
    latencies = [(received[vm] - sent) * 1000 for vm, sent in phase.sent.items() if vm in received]
    return {
        "phase": phase.name,
        "offered_per_s": phase.offered_per_s,
        "batch": phase.batch,
        "vms": len(phase.sent),
        "missing": missing,
        "achieved_per_s": round(sustained_rate(list(received.values())), 1),
        "accepted_per_s": round(len(phase.sent) / phase.seconds, 1) if phase.seconds else None,
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
    }


# -- what the services recorded ------------------------------------------------------------------
async def placement_costs(database_url: str, vm_ids: Sequence[str]) -> dict[str, Any]:
    dsn = database_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT (placement->>'decision_us')::float AS us, (placement->>'claim_conflicts')::int AS conflicts "
            "FROM vms WHERE id = ANY($1::uuid[]) AND placement ? 'decision_us'",
            list(vm_ids),
        )
    finally:
        await conn.close()
    decisions = [row["us"] for row in rows]
    conflicts = sum(row["conflicts"] or 0 for row in rows)
    return {
        "placements": len(rows),
        "decision_p50_us": round(percentile(decisions, 50), 1),
        "decision_p99_us": round(percentile(decisions, 99), 1),
        "claim_conflicts": conflicts,
        "conflicts_per_placement": round(conflicts / len(rows), 5) if rows else None,
    }


async def latency_segments(database_url: str, phase: Phase, fleets: Sequence[Fleet]) -> dict[str, dict[str, float]]:
    """Where a request's time goes, p50 and p99 of each leg (one machine, one clock): ``api``,
    request due to VM row committed (``created_at``); ``scheduler``, to its placement committed
    (``scheduled_at``); ``relay``, to the agent taking the command (vm.assigned, the gateway, the
    agent's queue)."""
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        rows = await conn.fetch(
            "SELECT id::text AS id, extract(epoch FROM created_at) AS created, "
            "extract(epoch FROM scheduled_at) AS scheduled FROM vms WHERE id = ANY($1::uuid[])",
            list(phase.sent),
        )
    finally:
        await conn.close()
    received = {vm: at for f in fleets for vm, at in f.receipts.items() if vm in phase.sent}
    legs: dict[str, list[float]] = {"api": [], "scheduler": [], "relay": [], "to_scheduled": []}
    for row in rows:
        if row["scheduled"] is None or row["id"] not in received:
            continue
        created, scheduled = float(row["created"]), float(row["scheduled"])
        legs["api"].append((created - phase.sent[row["id"]]) * 1000)
        legs["scheduler"].append((scheduled - created) * 1000)
        legs["relay"].append((received[row["id"]] - scheduled) * 1000)
        legs["to_scheduled"].append((scheduled - phase.sent[row["id"]]) * 1000)
    return {leg: {"p50": round(percentile(v, 50), 1), "p99": round(percentile(v, 99), 1)} for leg, v in legs.items()}


class Tap:
    """Copies of every message on the scheduling path, counted: a queue of the harness's own bound to
    ``vmsched`` (``vm.#``) and, for each host, to ``vmsched.agents`` (the agents' commands)."""

    def __init__(self, amqp_url: str, host_ids: Sequence[str]) -> None:
        self.amqp_url = amqp_url
        self.host_ids = host_ids
        self.messages: dict[str, int] = {}
        self.vms: dict[str, int] = {}
        self.reported: list[str] = []  # the VM of each vm.status, in order
        self.counted = asyncio.Event()

    async def __aenter__(self) -> Tap:
        import aio_pika

        self._connection = await aio_pika.connect(self.amqp_url)
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=1000)
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind("vmsched", routing_key="vm.#")
        for host_id in self.host_ids:
            await queue.bind("vmsched.agents", routing_key=host_id)
        await queue.consume(self._count, no_ack=True)
        return self

    async def _count(self, message: Any) -> None:
        key = "agent command" if message.exchange == "vmsched.agents" else str(message.routing_key)
        body = json.loads(message.body)
        carried = len(body.get("vms") or body.get("assignments") or [body])
        if key == "vm.status":
            self.reported.append(str(body.get("vm_id")))
        self.messages[key] = self.messages.get(key, 0) + 1
        self.vms[key] = self.vms.get(key, 0) + carried
        self.counted.set()

    async def seen(self, vms: int, keys: Sequence[str], timeout: float = 30.0) -> None:
        """Wait until the tap has counted ``vms`` VMs under each of ``keys`` (its copies arrive beside,
        not before, the agents' own), or the deadline."""
        deadline = time.monotonic() + timeout
        while any(self.vms.get(key, 0) < vms for key in keys) and time.monotonic() < deadline:
            self.counted.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.counted.wait(), deadline - time.monotonic())

    async def __aexit__(self, *exc: object) -> None:
        await self._connection.close()


SCHEDULING_PATH = ("vm.create", "vm.assigned", "vm.unschedulable", "agent command")


async def count_messages(
    stack: Stack, senders: Senders, fleets: Sequence[Fleet], host_ids: Sequence[str], phase: Phase, rate: float
) -> dict[str, Any]:
    async with Tap(stack.env["VMSCHED_AMQP_URL"], host_ids) as tap:
        await paced(senders, phase, rate, 2.0, phase.batch)
        missing = wait_received(fleets, phase.sent)
        placed = len(phase.sent) - missing
        await tap.seen(placed, ("agent command", "vm.status"))
    # Reports about VMs of earlier phases still on their way (a fleet of 10,000 lags its own reports)
    # are not this phase's cost: counted apart.
    earlier = sum(1 for vm in tap.reported if vm not in phase.sent)
    if earlier:
        tap.messages["vm.status"] -= earlier
        tap.vms["vm.status"] -= earlier
        tap.messages["vm.status of earlier VMs"] = tap.vms["vm.status of earlier VMs"] = earlier
    on_path = sum(tap.messages.get(key, 0) for key in SCHEDULING_PATH)
    return {
        "vms": placed,
        "by_routing_key": {key: {"messages": tap.messages[key], "vms": tap.vms[key]} for key in sorted(tap.messages)},
        "scheduling_path_per_vm": round(on_path / placed, 3) if placed else None,
        "all_per_vm": round(sum(tap.messages.values()) / placed, 3) if placed else None,
    }


async def messages_per_vm(
    stack: Stack, senders: Senders, fleets: Sequence[Fleet], host_ids: Sequence[str]
) -> dict[str, Any]:
    """Broker messages per VM placed, counted by a tap: 1,000 VMs in batches of 100 at 500/s, then 100
    single POSTs at 50/s. ``scheduling_path_per_vm``: vm.create, vm.assigned, vm.unschedulable and the
    agents' commands (what the target counts); ``all_per_vm``: with the agents' reports and the rest."""
    return {
        "batches_of_100": await count_messages(stack, senders, fleets, host_ids, Phase("messages", 500.0, 100), 500.0),
        "single": await count_messages(stack, senders, fleets, host_ids, Phase("messages", 50.0, 1), 50.0),
    }


def peak_rss_mb(pid: int) -> float:
    """The process's high-water mark of resident memory (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_hosts(prefix: str, count: int, timeout: float) -> None:
    client = redis.Redis.from_url(BASE_REDIS)
    wait_for(lambda: int(client.scard(f"{prefix}:hosts")) >= count, timeout, f"{count} hosts in the snapshot", 0.5)


@contextlib.contextmanager
def stack_with_fleets(
    iso: Isolated, workdir: Path, fleets: Sequence[tuple[str, int, str, str, float]]
) -> Iterator[tuple[Stack, list[Fleet], float]]:
    # No rate limit: the harness measures what the system takes, from one token.
    stack = Stack(env={**iso.env, "VMSCHED_RATE_LIMIT": "0"}, log_dir=workdir, api_port=18000 + random.randrange(1000))
    started: list[Fleet] = []
    with stack.running(schedulers=SCHEDULERS):
        try:
            began = time.monotonic()
            started = [Fleet.start(iso.env, workdir, *spec) for spec in fleets]
            for fleet in started:
                fleet.wait_ready(timeout=600)
            wait_hosts(iso.prefix, sum(f.count for f in started), timeout=120)
            yield stack, started, time.monotonic() - began
        finally:
            for fleet in started:
                fleet.stop()


@contextlib.contextmanager
def profiled(stack: Stack, fleets: Sequence[Fleet], label: str) -> Iterator[None]:
    """With BENCH_PYSPY=DIR, py-spy samples every service (and the fleet) while the block runs and
    leaves collapsed stacks in DIR/<label>-<service>.txt (flamegraph.pl or speedscope read them)."""
    target = os.environ.get("BENCH_PYSPY")
    if not target:
        yield
        return
    Path(target).mkdir(parents=True, exist_ok=True)
    pids = {name: service.pid for name, service in stack.services.items()}
    pids.update({f"fleet{n}": fleet.process.pid for n, fleet in enumerate(fleets)})
    command = [
        str(Path(sys.executable).parent / "py-spy"),
        "record",
        "--nonblocking",
        "--format",
        "raw",
        "--rate",
        "50",
    ]
    spies = [
        subprocess.Popen(
            [*command, "--pid", str(pid), "--output", str(Path(target) / f"{label}-{name}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(30)


def mean_batch_sizes(stack: Stack) -> dict[str, float]:
    """Mean items per micro-batch so far (``vmsched_batch_size``), per batch, over every service."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    urls = [service.metrics_url for service in stack.services.values() if service.metrics_url]
    urls.append(f"{stack.api_url}/metrics")
    for url in urls:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode().splitlines():
                for suffix, into in (("_sum", sums), ("_count", counts)):
                    prefix = f'vmsched_batch_size{suffix}{{batch="'
                    if line.startswith(prefix):
                        name = line[len(prefix) : line.index('"', len(prefix))]
                        into[name] = into.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return {name: round(sums[name] / counts[name], 1) for name in sums if counts.get(name)}


def component_pids(stack: Stack, fleets: Sequence[Fleet]) -> dict[int, str]:
    """The processes this harness started, by component (schedulers together), for cpu_account."""
    named = {service.pid: name.split("-")[0] for name, service in stack.services.items()}
    named.update({fleet.process.pid: "fleet" for fleet in fleets})
    named[os.getpid()] = "load generator"
    return named


# -- the runs ------------------------------------------------------------------------------------
async def load_runs(stack: Stack, fleets: list[Fleet], plan: Plan, host_ids: Sequence[str]) -> list[dict[str, Any]]:
    runs = []
    senders = Senders(stack)
    try:
        # Not measured: the first seconds after the services start fill their connection pools and
        # caches (the first second's p99 is two to three times the steady one).
        warm_up = Phase("warm-up", LATENCY_RATE, 1)
        await paced(senders, warm_up, LATENCY_RATE, WARM_UP_SECONDS, 1)
        wait_received(fleets, warm_up.sent)
        for run in range(plan.runs):
            phases: list[dict[str, Any]] = []
            latency = Phase("latency", LATENCY_RATE, 1)
            await paced(senders, latency, LATENCY_RATE, plan.latency_seconds, 1)
            phases.append(summarise(latency, fleets, wait_received(fleets, latency.sent)))
            phases[-1]["segments_ms"] = await latency_segments(stack.env["VMSCHED_DATABASE_URL"], latency, fleets)
            for rate in plan.sweep_rates:
                batch = max(1, min(1000, int(rate / 10)))
                step = Phase(f"batch@{rate:g}", rate, batch)
                await paced(senders, step, rate, plan.step_seconds, batch)
                phases.append(summarise(step, fleets, wait_received(fleets, step.sent)))
                if phases[-1]["achieved_per_s"] < SATURATED * rate:
                    break  # saturated: a higher offered rate only grows the backlog (saturation measures it)
            saturation = Phase("saturation", None, 500)
            named = component_pids(stack, fleets)
            cpu_before, wall_before = cpu_times(named), time.monotonic()
            with profiled(stack, fleets, f"h{fleets[0].count}-run{run + 1}"):
                await flat_out(senders, saturation, plan.saturation_vms, 500)
                missing = wait_received(fleets, saturation.sent)
            cpu = spent(cpu_before, cpu_times(named))
            wall = time.monotonic() - wall_before
            summary = summarise(saturation, fleets, missing)
            summary["cpu_ms_per_vm"] = per_vm_ms(cpu, len(saturation.sent) - missing)
            summary["cores_busy"] = round(sum(cpu.values()) / wall, 2)
            summary["mean_batch"] = mean_batch_sizes(stack)
            phases.append(summary)
            for p in phases:
                print(f"  run {run + 1}: {p}", flush=True)
            entry: dict[str, Any] = {"phases": phases}
            if run == 0:  # the same every run: counted once
                entry["messages"] = await messages_per_vm(stack, senders, fleets, host_ids)
                print(f"  messages: {entry['messages']}", flush=True)
            runs.append(entry)
    finally:
        await senders.aclose()
    return runs


def fleet_size_run(plan: Plan, hosts: int, workdir: Path) -> dict[str, Any]:
    print(f"== {hosts} hosts", flush=True)
    with (
        isolated() as iso,
        stack_with_fleets(iso, workdir, [("bench", hosts, "mixed", "", THROUGHPUT_OVERCOMMIT_CPU)]) as (
            stack,
            fleets,
            startup,
        ),
    ):
        print(f"  fleet of {hosts} ready in {startup:.1f} s", flush=True)
        idle = idle_cores(stack, fleets)
        print(f"  cores busy with nothing placed: {idle}", flush=True)
        host_ids = [host.id for host in generate_hosts(hosts, prefix="bench", capacity=UNIFORM_CAPACITY)]
        runs = uvloop.run(load_runs(stack, fleets, plan, host_ids))
        vm_ids = list(fleets[0].receipts)
        costs = asyncio.run(placement_costs(iso.env["VMSCHED_DATABASE_URL"], vm_ids))
        rss = [peak_rss_mb(stack.services[f"scheduler-{i}"].pid) for i in range(1, SCHEDULERS + 1)]
    return {
        "hosts": hosts,
        "fleet_startup_s": round(startup, 1),
        "idle_cores_busy": idle,
        "runs": runs,
        "messages": runs[0].get("messages") if runs else None,
        **costs,
        "scheduler_peak_rss_mb": rss,
    }


# -- placements beside a backlog of waiting VMs ------------------------------------------------------
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


def idle_cores(stack: Stack, fleets: Sequence[Fleet]) -> dict[str, float]:
    """What the fleet costs with nothing being placed (heartbeats, sweeps, reconciliation), in cores
    per component over one heartbeat period: the background every placement shares the machine with."""
    named = component_pids(stack, fleets)
    before, began = cpu_times(named), time.monotonic()
    time.sleep(IDLE_SECONDS)  # a measurement window, not a wait for anything
    return cores_busy(spent(before, cpu_times(named)), time.monotonic() - began)


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


async def post_all(client: httpx.AsyncClient, bodies: list[dict[str, Any]], phase: Phase) -> None:
    for start in range(0, len(bodies), 500):
        await post_batch(client, bodies[start : start + 500], phase)


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


# -- results -------------------------------------------------------------------------------------
def by_phase(size: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per phase, the median over runs of each figure (a run whose sweep stopped early lacks the
    later steps; their medians are over the runs that have them)."""
    merged: dict[str, dict[str, Any]] = {}
    names = list(dict.fromkeys(p["phase"] for run in size["runs"] for p in run["phases"]))
    for name in names:
        rows = [p for run in size["runs"] for p in run["phases"] if p["phase"] == name]
        offered = [r["offered_per_s"] for r in rows if r["offered_per_s"] is not None]
        merged[name] = {
            "offered_per_s": round(median(offered), 1) if offered else None,
            "batch": rows[0]["batch"],
            "runs": len(rows),
            **{
                key: round(median([r[key] for r in rows if r[key] is not None]), 2)
                for key in ("achieved_per_s", "accepted_per_s", "p50_ms", "p95_ms", "p99_ms")
            },
            "missing": sum(r["missing"] for r in rows),
        }
        segments = [r["segments_ms"] for r in rows if r.get("segments_ms")]
        if segments:
            merged[name]["segments_ms"] = {
                leg: {q: round(median([seg[leg][q] for seg in segments]), 1) for q in ("p50", "p99")}
                for leg in segments[0]
            }
        costs = [r["cpu_ms_per_vm"] for r in rows if r.get("cpu_ms_per_vm")]
        if costs:
            components = list(dict.fromkeys(c for cost in costs for c in cost))
            merged[name]["cpu_ms_per_vm"] = {
                c: round(median([cost[c] for cost in costs if c in cost]), 3) for c in components
            }
            merged[name]["cores_busy"] = round(median([r["cores_busy"] for r in rows]), 2)
    return merged


def broker_floor(results: Path) -> dict[str, Any] | None:
    """The newest ``broker-floor-*.json`` measured over 1,000 agent queues (``make bench`` writes one
    first), or None."""
    floors = sorted(results.glob("broker-floor-*.json"))
    for path in reversed(floors):
        floor: dict[str, Any] = json.loads(path.read_text())
        hops = floor.get("hops", [])
        if floor.get("agent_queues") == 1000 and any(
            h["queue"] == "classic" and not h.get("persistent", True) for h in hops
        ):
            return {"file": path.name, **floor}
    return None


def broker_ceiling(size: dict[str, Any], floor: dict[str, Any]) -> dict[str, Any] | None:
    """The placements/s RabbitMQ alone would allow this machine for the messages a batched placement
    cost in this run: each quorum-queue message (vm.*) at the floor's quorum hop, each agent command at
    its transient classic hop, both flat out, over every core; and the run's share of it."""
    counted = (size.get("messages") or {}).get("batches_of_100")
    if not counted or not counted["vms"]:
        return None
    per_key = counted["by_routing_key"]
    quorum_messages = (
        sum(v["messages"] for k, v in per_key.items() if k not in ("agent command", "vm.status of earlier VMs"))
        / counted["vms"]
    )
    command_messages = per_key.get("agent command", {"messages": 0})["messages"] / counted["vms"]
    hop = {
        kind: next(
            h["broker_us_per_message"]
            for h in floor["hops"]
            if h["offered_per_s"] is None
            and (h["queue"] == "quorum" if kind == "quorum" else h["queue"] == "classic" and not h["persistent"])
        )
        for kind in ("quorum", "command")
    }
    us_per_vm = quorum_messages * hop["quorum"] + command_messages * hop["command"]
    ceiling = (floor.get("cpu_count") or os.cpu_count() or 1) * 1e6 / us_per_vm
    achieved = size["phases"]["saturation"]["achieved_per_s"]
    return {
        "floor": floor["file"],
        "broker_us_per_vm": round(us_per_vm, 1),
        "ceiling_per_s": round(ceiling),
        "achieved_over_ceiling": round(achieved / ceiling, 3),
    }


def verdicts(sizes: list[dict[str, Any]], extra: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 12's targets, per fleet size where they depend on it."""
    out: dict[str, Any] = {}

    def judge(name: str, value: float | None, target: str, met: bool) -> None:
        out[name] = {"value": value, "target": target, "met": value is not None and met}

    for size in sizes:
        hosts, phases = size["hosts"], size["phases"]
        throughput = phases["saturation"]["achieved_per_s"]
        goal = THROUGHPUT_TARGETS.get(hosts)
        if goal is not None:
            judge(f"throughput_per_s@{hosts}", throughput, f">= {goal:g}", throughput >= goal)
        scheduler = (phases["saturation"].get("cpu_ms_per_vm") or {}).get("scheduler")
        judge(
            f"scheduler_cpu_ms_per_placement@{hosts}",
            scheduler,
            f"<= {SCHEDULER_CPU_MS_TARGET}",
            scheduler is not None and scheduler <= SCHEDULER_CPU_MS_TARGET,
        )
        to_scheduled = phases["latency"].get("segments_ms", {}).get("to_scheduled", {}).get("p99")
        judge(
            f"p99_ms_post_to_scheduled_at_{LATENCY_RATE:g}@{hosts}",
            to_scheduled,
            f"< {P99_TO_SCHEDULED_MS_TARGET:g}",
            to_scheduled is not None and to_scheduled < P99_TO_SCHEDULED_MS_TARGET,
        )
        counted = size.get("messages") or {}
        for kind in ("batches_of_100", "single"):
            per_vm = (counted.get(kind) or {}).get("scheduling_path_per_vm")
            judge(
                f"messages_per_vm_{kind}@{hosts}",
                per_vm,
                f"<= {MESSAGES_PER_VM_TARGET:g}",
                per_vm is not None and per_vm <= MESSAGES_PER_VM_TARGET,
            )
    rss = max(max(s["scheduler_peak_rss_mb"]) for s in sizes)
    judge("scheduler_peak_rss_mb", rss, "<= 250", rss <= 250)
    if extra is not None:
        conflicts = extra["fill"]["conflicts_per_placement"] or 0.0
        judge("conflicts_per_placement_at_80pct", conflicts, "<= 0.01", conflicts <= 0.01)
        pack = extra["packing"]
        judge(
            "best_fit_over_bound",
            pack["best_fit_over_bound"],
            "<= 1.10 and fewer hosts than least_loaded",
            pack["best_fit_over_bound"] <= 1.10 and pack["best_fit_hosts"] < pack["least_loaded_hosts"],
        )
    return out


def print_table(result: dict[str, Any]) -> None:
    print()
    header = ("hosts", "phase", "offered/s", "batch", "achieved/s", "p50 ms", "p95 ms", "p99 ms")
    print("{:>6} {:<14} {:>9} {:>5} {:>10} {:>8} {:>8} {:>8}".format(*header))
    for size in result["fleets"]:
        for name, p in size["phases"].items():
            offered = "max" if p["offered_per_s"] is None else f"{p['offered_per_s']:g}"
            print(
                f"{size['hosts']:>6} {name:<14} {offered:>9} {p['batch']:>5} {p['achieved_per_s']:>10.0f} "
                f"{p['p50_ms']:>8.1f} {p['p95_ms']:>8.1f} {p['p99_ms']:>8.1f}"
            )
        for name, p in size["phases"].items():
            if p.get("segments_ms"):
                legs = ", ".join(f"{leg} {v['p50']:.0f}/{v['p99']:.0f}" for leg, v in p["segments_ms"].items())
                print(f"{size['hosts']:>6} {name} legs p50/p99 ms: {legs}")
        if size.get("idle_cores_busy"):
            idle = ", ".join(f"{name} {cores:.3f}" for name, cores in size["idle_cores_busy"].items())
            print(f"{size['hosts']:>6} cores busy with nothing placed: {idle}")
        cpu = size["phases"]["saturation"].get("cpu_ms_per_vm")
        if cpu:
            spent = ", ".join(f"{name} {ms:.2f}" for name, ms in cpu.items())
            print(f"{size['hosts']:>6} CPU ms per placement at saturation: {spent}")
        for kind, counted in (size.get("messages") or {}).items():
            keys = ", ".join(f"{k} {v['messages']}" for k, v in counted["by_routing_key"].items())
            print(
                f"{size['hosts']:>6} messages per VM ({kind}): scheduling path {counted['scheduling_path_per_vm']}, "
                f"all {counted['all_per_vm']} ({counted['vms']} VMs: {keys})"
            )
        if size.get("broker_ceiling"):
            ceiling = size["broker_ceiling"]
            print(
                f"{size['hosts']:>6} broker floor: {ceiling['broker_us_per_vm']} us of RabbitMQ CPU per VM, ceiling "
                f"{ceiling['ceiling_per_s']}/s, achieved {ceiling['achieved_over_ceiling']:.0%} of it"
            )
        print(
            f"{size['hosts']:>6} decision p50/p99 {size['decision_p50_us']}/{size['decision_p99_us']} us, "
            f"conflicts/placement {size['conflicts_per_placement']}, "
            f"scheduler peak RSS {size['scheduler_peak_rss_mb']} MB"
        )
    if result.get("contention_and_packing"):
        extra = result["contention_and_packing"]
        print(f"fill to 80%: {extra['fill']}")
        print(f"packing: {extra['packing']}")
    print()
    for name, verdict in result["targets"].items():
        print(f"{'MET ' if verdict['met'] else 'MISS'} {name}: {verdict['value']} (target {verdict['target']})")


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for size, colour in zip(result["fleets"], ("tab:blue", "tab:orange", "tab:green", "tab:purple"), strict=False):
        # Points in order of offered rate: the single-POST phases sit between the batch steps.
        points = sorted(
            (p for p in size["phases"].values() if p["offered_per_s"] is not None), key=lambda p: p["offered_per_s"]
        )
        offered = [p["offered_per_s"] for p in points]
        sat = size["phases"]["saturation"]
        left.plot(
            offered, [p["achieved_per_s"] for p in points], marker="o", color=colour, label=f"{size['hosts']} hosts"
        )
        left.axhline(sat["achieved_per_s"], linestyle=":", color=colour)
        right.plot(offered, [p["p99_ms"] for p in points], marker="o", color=colour, label=f"{size['hosts']} hosts p99")
        right.plot(
            offered,
            [p["p50_ms"] for p in points],
            marker="x",
            linestyle="--",
            color=colour,
            label=f"{size['hosts']} hosts p50",
        )
    top = max(max(p["offered_per_s"] or 0 for p in s["phases"].values()) for s in result["fleets"])
    left.plot([0, top], [0, top], color="grey", linewidth=0.8, label="achieved = offered")
    for hosts, goal in THROUGHPUT_TARGETS.items():
        left.axhline(goal, color="red", linewidth=0.8, linestyle="--", label=f"target {goal:,.0f}/s at {hosts:,} hosts")
    left.set(
        xlabel=f"offered VMs/s ({LATENCY_RATE:g}: single POSTs; the rest: batches)", ylabel="placements/s end to end"
    )
    left.set_title("Throughput (dotted: saturation)")
    right.axhline(
        P99_TO_SCHEDULED_MS_TARGET,
        color="red",
        linewidth=0.8,
        linestyle="--",
        label=f"target: p99 POST to scheduled {P99_TO_SCHEDULED_MS_TARGET:g} ms at {LATENCY_RATE:g}/s",
    )
    right.set(xlabel="offered VMs/s", ylabel="ms, request sent to command received", yscale="log")
    right.set_title("Latency end to end")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    fig.suptitle(f"vmsched end to end, {result['recorded_at'][:10]}, {SCHEDULERS} schedulers, 2 cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def python_loop_seconds() -> float:
    """This machine's speed as one number: seconds for 20 million additions in a Python loop, the
    median of three. Figures from machines (or hours) whose loop differs are not comparable: the
    same loop took 1.26 s here on a quiet moment and 2.8 to 3.5 s just after a benchmark run."""
    timings = []
    for _ in range(3):
        began, total = time.perf_counter(), 0
        for number in range(20_000_000):
            total += number
        timings.append(time.perf_counter() - began)
    return round(sorted(timings)[1], 2)


def machine() -> dict[str, Any]:
    return {
        "python_loop_s": python_loop_seconds(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version,
        "load_average_at_start": os.getloadavg(),
        "rabbitmq_file_descriptor_limit": rabbitmq_fd_limit(),
    }


def rabbitmq_fd_limit() -> int | None:
    """The node's open-file limit: each agent queue needs file handles, and a node at 1,024 stalls
    with thousands of them (docs/performance.md, "Before you run it")."""
    try:
        status = subprocess.run(["rabbitmqctl", "status"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = status.splitlines()
    for index, line in enumerate(lines):
        if "File Descriptors" in line:
            for following in lines[index + 1 : index + 4]:
                if "limit:" in following and "Sockets" not in following:
                    return int(following.rsplit("limit:", 1)[1].strip())
    return None


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description="vmsched end-to-end benchmark")
    today = datetime.now(UTC).date().isoformat()
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"e2e-{today}.json")
    parser.add_argument("--no-extra", action="store_true", help="skip the contention and packing stack")
    parser.add_argument(
        "--waiting-only",
        action="store_true",
        help="only the waiting phase: placements with and without 10,000 waiting VMs (BENCH_WAITING_HOSTS hosts)",
    )
    options = parser.parse_args()
    plan = plan_from_env()
    waiting_hosts = int(os.environ.get("BENCH_WAITING_HOSTS", "1000"))
    waiting_vms = int(os.environ.get("BENCH_WAITING_VMS", str(WAITING_VMS)))
    if options.waiting_only:
        with tempfile.TemporaryDirectory(prefix="vmsched-bench-") as tmp:
            backlog = waiting_backlog_run(plan, waiting_hosts, waiting_vms, Path(tmp))
        out = options.out.with_name(options.out.stem.replace("e2e-", "waiting-") + ".json")
        out.write_text(
            json.dumps({"benchmark": "waiting", "git_commit": git_commit(), "machine": machine(), **backlog}, indent=2)
            + "\n"
        )
        print(f"saved {out}")
        return 0
    limit = rabbitmq_fd_limit()
    if limit is not None and limit < max(plan.hosts) + 1000:
        print(
            f"warning: RabbitMQ may open only {limit} files, and {max(plan.hosts)} agent queues need more; "
            "raise it first (docs/performance.md)",
            flush=True,
        )
    recorded_at = datetime.now(UTC).isoformat()
    started = time.monotonic()
    info = machine()
    print(f"machine: python loop {info['python_loop_s']} s (docs/performance.md, 'Comparing runs')", flush=True)
    with tempfile.TemporaryDirectory(prefix="vmsched-bench-") as tmp:
        workdir = Path(tmp)
        sizes = []
        for hosts in plan.hosts:
            size = fleet_size_run(plan, hosts, workdir / f"h{hosts}")
            size["phases"] = by_phase(size)
            floor = broker_floor(options.out.parent)
            size["broker_ceiling"] = broker_ceiling(size, floor) if floor else None
            sizes.append(size)
        skip_extra = options.no_extra or os.environ.get("BENCH_EXTRA") == "0"
        extra = None if skip_extra else contention_and_packing(plan, workdir / "extra")
        waiting = None if skip_extra else waiting_backlog_run(plan, waiting_hosts, waiting_vms, workdir / "waiting")
    result = {
        "benchmark": "e2e",
        "recorded_at": recorded_at,
        "git_commit": git_commit(),
        "settings": {
            **{k: v for k, v in plan.__dict__.items()},
            "schedulers": SCHEDULERS,
            "latency_rate_per_s": LATENCY_RATE,
            "heartbeat_interval_s": HEARTBEAT_INTERVAL,
            "throughput_vm": SMALL_VM,
            "throughput_fleet_overcommit_cpu": THROUGHPUT_OVERCOMMIT_CPU,
            "quick": os.environ.get("BENCH_QUICK") == "1",
            "end_to_end": "load generator sends the request -> agent takes the create command off its queue",
        },
        "machine": {**info, "load_average_at_end": os.getloadavg()},
        "duration_s": round(time.monotonic() - started, 1),
        "fleets": sizes,
        "contention_and_packing": extra,
        "waiting_backlog": waiting,
        "targets": verdicts(sizes, extra),
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, options.out.with_suffix(".png"))
    print_table(result)
    print(f"\nsaved {options.out} and {options.out.with_suffix('.png')} in {result['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
