"""The load generator (bench/wire_client.py): one VM per POST from one or many clients, on a fixed
schedule, or batches flat out."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

from bench.single.plan import BATCH, VM, body
from bench.wire_client import WireClient
from devtools.stack import Stack


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
