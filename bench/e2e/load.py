"""The load generator: VMs sent on a fixed schedule (an open loop) or as fast as the API takes them,
in requests of one or of a batch; how long each took to reach its agent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.e2e.fleets import Fleet
from bench.e2e.plan import DRAIN_LIMIT, SMALL_VM, STALL_TIMEOUT
from bench.e2e_stats import percentile, sustained_rate
from devtools.stack import Stack, api_client

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


async def post_all(client: httpx.AsyncClient, bodies: list[dict[str, Any]], phase: Phase) -> None:
    for start in range(0, len(bodies), 500):
        await post_batch(client, bodies[start : start + 500], phase)
