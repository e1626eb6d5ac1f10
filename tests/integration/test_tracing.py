"""One trace from HTTP to agent: the real API, scheduler and gateway apps and a simulated agent,
run in this process (so that one in-memory exporter sees every span) on servers of their own
(so that no other scheduler or gateway takes a message of this trace)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from faststream import FastStream
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devtools.stack import api_client, free_port
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers, provide_servers
from vmsched_agent.hosts import HostSpec
from vmsched_api.app import build_app as build_api
from vmsched_contract.messages import Resources
from vmsched_gateway.bootstrap import build_app as build_gateway
from vmsched_runtime.settings import Settings
from vmsched_runtime.telemetry import build_tracer_provider, export_to, instrument_libraries, uninstrument_libraries
from vmsched_scheduler.bootstrap import build_app as build_scheduler
from vmsched_scheduler.tracing import CLAIM_SPAN, COMMIT_SPAN, DECISION_SPAN

T = TypeVar("T")

BIG = HostSpec(id="trace-big", capacity=Resources(cpu=16, memory_mb=32768, disk_gb=200))
SMALL = HostSpec(id="trace-small", capacity=Resources(cpu=1, memory_mb=32768, disk_gb=200))


@dataclass
class Traced:
    api_url: str
    exporter: InMemorySpanExporter

    def async_client(self, **options: Any) -> httpx.AsyncClient:
        return api_client(self.api_url, TOKEN, **options)


TOKEN = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def own_servers() -> Iterator[Servers]:
    with provide_servers() as servers:
        yield servers


@contextlib.contextmanager
def in_memory_spans() -> Iterator[InMemorySpanExporter]:
    """Every span this process ends, kept in memory; the provider is the process's (it can be set
    only once), so one set by an earlier test is reused."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = build_tracer_provider("tests", Settings())
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    export_to(provider, SimpleSpanProcessor(exporter))
    instrument_libraries(provider)
    try:
        yield exporter
    finally:
        uninstrument_libraries()
        exporter.shutdown()  # later spans are dropped, not kept for the rest of the session


@contextlib.asynccontextmanager
async def consuming(app: FastStream) -> AsyncIterator[None]:
    """A FastStream app started as ``run`` starts it, without taking over the signals."""
    async with app.lifespan_context():
        await app.start()
        try:
            yield
        finally:
            await app.stop()


@contextlib.asynccontextmanager
async def serving(app: object, port: int) -> AsyncIterator[None]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))  # type: ignore[arg-type]
    task = asyncio.create_task(server.serve())
    try:
        await eventually(_now(lambda: server.started or task.done()), bool, timeout=30, what="the API to listen")
        if task.done():
            task.result()
        yield
    finally:
        server.should_exit = True
        await task


def _now(read: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    """An in-process condition as ``eventually`` polls it."""

    async def probe() -> T:
        return read()

    return probe


@pytest.fixture(scope="module")
async def traced(own_servers: Servers) -> AsyncIterator[Traced]:
    settings = Settings.from_environment(own_servers.env(VMSCHED_BOOTSTRAP_TOKEN=TOKEN))
    port = free_port()
    with in_memory_spans() as exporter:
        api = build_api(settings)
        fleet = await enrolled_fleet(own_servers, [BIG, SMALL], heartbeat_interval=1.0)
        async with (
            serving(api, port),
            consuming(build_gateway(settings)),
            consuming(build_scheduler(settings).app),
            fleet,
            api_client(f"http://127.0.0.1:{port}", TOKEN) as client,
        ):
            await eventually(
                lambda: client.get("/v1/hosts"),
                lambda r: sum(h["status"] == "online" for h in r.json()) == 2,
                timeout=60,
                what="both hosts online",
            )
            yield Traced(api_url=f"http://127.0.0.1:{port}", exporter=exporter)


def named(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, f"expected one span {name!r}, found {len(found)} among {sorted({s.name for s in spans})}"
    return found[0]


def ancestor_ids(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[int]:
    ids = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        ids.append(parent.span_id)
        parent = by_id[parent.span_id].parent
    return ids


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    return [by_id[span_id].name for span_id in ancestor_ids(span, by_id)]


async def test_one_trace_spans_http_scheduler_redis_postgres_gateway_and_agent(traced: Traced) -> None:
    async with traced.async_client(timeout=30) as client:
        created = await client.post("/v1/vms", json={"name": "traced", "cpu": 2, "memory_mb": 1024, "disk_gb": 10})
        assert created.status_code == 202, created.text
        vm_id = created.json()["id"]
        await eventually(
            lambda: client.get(f"/v1/vms/{vm_id}"),
            lambda r: r.json()["status"] == "running",
            timeout=30,
            what="the VM to run",
        )
    http = await eventually(
        _now(lambda: [s for s in traced.exporter.get_finished_spans() if s.name == "POST /v1/vms"]),
        bool,
        timeout=10,
        what="the HTTP span",
    )
    trace_id = http[0].context.trace_id

    def this_trace() -> list[ReadableSpan]:
        return [s for s in traced.exporter.get_finished_spans() if s.context.trace_id == trace_id]

    # The gateway's handling of the agent's vm.status ends last.
    spans = await eventually(
        _now(this_trace),
        lambda found: any(s.name == "vmsched.vm.status process" for s in found),
        timeout=10,
        what="the gateway's vm.status span",
    )
    by_id = {span.context.span_id: span for span in spans}
    host = BIG.id
    chain = [
        "POST /v1/vms",
        "vmsched.vm.create publish",  # API, after the commit
        "vmsched.vm.create process",  # scheduler
        DECISION_SPAN,
        CLAIM_SPAN,
        COMMIT_SPAN,
        "vmsched.vm.assigned publish",
        "vmsched.vm.assigned process",  # gateway
        f"vmsched.agents.{host} publish",  # the command to the host's queue
        f"agent.{host} process",  # the agent
        "vmsched.vm.status publish",
        "vmsched.vm.status process",  # gateway
    ]
    found = {name: named(spans, name) for name in chain}
    assert found["POST /v1/vms"].parent is None, "the HTTP request is the root of the trace"

    def descends(child: str, ancestor: str) -> bool:
        """Whether span ``child`` is below span ``ancestor``, or below the span that published it:
        FastStream puts a message's "create" span, the publish span's parent, in the headers."""
        above = ancestor_ids(found[child], by_id)
        target = found[ancestor]
        return target.context.span_id in above or (
            target.name.endswith(" publish") and target.parent is not None and target.parent.span_id in above
        )

    hops = [
        ("POST /v1/vms", "vmsched.vm.create publish"),
        ("vmsched.vm.create publish", "vmsched.vm.create process"),
        ("vmsched.vm.create process", DECISION_SPAN),
        ("vmsched.vm.create process", CLAIM_SPAN),
        ("vmsched.vm.create process", COMMIT_SPAN),
        ("vmsched.vm.create process", "vmsched.vm.assigned publish"),
        ("vmsched.vm.assigned publish", "vmsched.vm.assigned process"),
        ("vmsched.vm.assigned process", f"vmsched.agents.{host} publish"),
        (f"vmsched.agents.{host} publish", f"agent.{host} process"),
        (f"agent.{host} process", "vmsched.vm.status publish"),
        ("vmsched.vm.status publish", "vmsched.vm.status process"),
    ]
    for before, after in hops:
        assert descends(after, before), f"{after} does not descend from {before}: {ancestors(found[after], by_id)}"
    # The scheduler's steps happen in this order.
    steps = [found[name].start_time or 0 for name in (DECISION_SPAN, CLAIM_SPAN, COMMIT_SPAN)]
    steps.append(found["vmsched.vm.assigned publish"].start_time or 0)
    assert steps == sorted(steps)

    decision = found[DECISION_SPAN].attributes or {}
    assert decision["vmsched.strategy"] == "least_loaded"
    assert decision["vmsched.hosts.considered"] == 2
    assert decision["vmsched.hosts.rejected"] == 1  # SMALL has 1 CPU, the VM asks for 2
    assert decision["vmsched.rejected.cpu"] == 1
    assert decision["vmsched.host"] == host
    assert (found[CLAIM_SPAN].attributes or {})["vmsched.claim.outcome"] == "claimed"
    assert (found[COMMIT_SPAN].attributes or {})["vmsched.commit.outcome"] == "placed"
    # The instrumentations' spans: the claim is one Redis script, the commit PostgreSQL statements.
    below_claim = [s for s in spans if CLAIM_SPAN in ancestors(s, by_id)]
    below_commit = [s for s in spans if COMMIT_SPAN in ancestors(s, by_id)]
    assert any((s.attributes or {}).get("db.system") == "redis" for s in below_claim), below_claim
    assert any((s.attributes or {}).get("db.system") == "postgresql" for s in below_commit), below_commit
    # Every span of the request, in every service, shares the one trace.
    assert {s.context.trace_id for s in spans} == {trace_id}
