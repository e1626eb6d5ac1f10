"""Tracing for every vmsched process: one SDK TracerProvider, its exporters chosen by the standard
``OTEL_*`` variables, and the instrumentations of the libraries a placement goes through.

The provider is installed even when nothing is exported: its trace ids are what ties the log lines
of one request together across services (see :mod:`vmsched_runtime.logs`), and they travel in the
AMQP headers (FastStream's ``RabbitTelemetryMiddleware``, added by ``make_broker``). Until some
exporter is attached, though, no span is recorded (:class:`RecordWhenExported`) and Redis and
PostgreSQL are not instrumented: a placement's trace costs a few unrecorded spans, not dozens of
recorded ones (tests/faults/test_concurrency.py, 4 schedulers placing 5,000 VMs on this 2-core
machine: 211 s recording every span, 149 s without tracing).

- ``OTEL_TRACES_EXPORTER``: ``otlp``, ``console``, ``none`` (comma-separated). Unset: ``otlp`` when
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set, else ``none``.
- ``OTEL_SERVICE_NAME`` overrides the service name (default ``vmsched-<service>``).
- ``OTEL_SDK_DISABLED=true``: no provider at all (no trace ids either).
- ``OTEL_TRACES_SAMPLER`` (and ``_ARG``) choose which traces are recorded once exported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult, _get_from_env_or_default
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes

from vmsched_runtime.settings import Settings

if TYPE_CHECKING:
    # The instrumentations are the services' (vmsched-pg's and vmsched-redis's dependencies), not an agent's.
    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

# Paths the HTTP instrumentation leaves alone: probes and scrapes would drown the real requests.
UNTRACED_PATHS = "healthz,readyz,metrics"


def chosen_exporters(settings: Settings) -> list[str]:
    """The exporter names the settings ask for, ``none`` dropped."""
    names = [name.strip() for name in settings.otel_traces_exporter.split(",") if name.strip()]
    if not names:
        endpoint = settings.otel_exporter_otlp_endpoint or settings.otel_exporter_otlp_traces_endpoint
        names = ["otlp"] if endpoint else []
    return [name for name in dict.fromkeys(names) if name != "none"]


def _exporter(name: str) -> SpanExporter:
    if name == "otlp":
        # Imported only when asked for: it pulls in protobuf and requests.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # endpoint, headers, timeout: from the OTEL_EXPORTER_OTLP_* variables
    return ConsoleSpanExporter()


class RecordWhenExported(Sampler):
    """Records nothing until an exporter is attached (:func:`export_to`), then samples as
    OTEL_TRACES_SAMPLER says. An unrecorded span still has a trace id, for the logs and the
    headers, at half the cost of a recorded one."""

    def __init__(self, then: Sampler) -> None:
        self.then = then
        self.exporting = False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if self.exporting:
            return self.then.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        parent = trace.get_current_span(parent_context).get_span_context()
        return SamplingResult(Decision.DROP, None, parent.trace_state if parent.is_valid else None)

    def get_description(self) -> str:
        return f"RecordWhenExported{{{self.then.get_description()}}}"


def build_tracer_provider(service: str, settings: Settings) -> TracerProvider:
    """A provider named ``vmsched-<service>`` (or OTEL_SERVICE_NAME) with the chosen exporters."""
    # Resource.create adds OTEL_RESOURCE_ATTRIBUTES; the service name is ours or OTEL_SERVICE_NAME.
    name = settings.otel_service_name or f"vmsched-{service}"
    # The SDK's own reading of OTEL_TRACES_SAMPLER (parentbased_always_on when unset).
    sampler = RecordWhenExported(_get_from_env_or_default())
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}), sampler=sampler)
    for exporter in chosen_exporters(settings):
        export_to(provider, BatchSpanProcessor(_exporter(exporter)))
    return provider


def export_to(provider: TracerProvider, processor: SpanProcessor) -> None:
    """Hand every span from now on to ``processor`` (recording them, if they were not yet)."""
    provider.add_span_processor(processor)
    if isinstance(provider.sampler, RecordWhenExported):
        provider.sampler.exporting = True


def is_exporting(provider: TracerProvider) -> bool:
    return not isinstance(provider.sampler, RecordWhenExported) or provider.sampler.exporting


def setup_tracing(service: str, settings: Settings) -> TracerProvider | None:
    """Install the process's tracer provider, and when it exports, instrument Redis and asyncpg;
    call once, at start."""
    if settings.otel_sdk_disabled:
        return None
    provider = build_tracer_provider(service, settings)
    trace.set_tracer_provider(provider)
    if is_exporting(provider):
        instrument_libraries(provider)
    return provider


def _instrumentors() -> tuple[BaseInstrumentor, ...]:
    # Imported here, and only where installed (by vmsched-redis and vmsched-pg): they import redis and
    # asyncpg, which an agent (sharing this module) has not.
    found: list[BaseInstrumentor] = []
    with contextlib.suppress(ImportError):
        from opentelemetry.instrumentation.redis import RedisInstrumentor

        found.append(RedisInstrumentor())  # each is a singleton: the process-wide instance
    with contextlib.suppress(ImportError):
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

        found.append(AsyncPGInstrumentor())  # type: ignore[no-untyped-call]
    return tuple(found)


def instrument_libraries(provider: TracerProvider) -> None:
    """Spans for every Redis command (the claim is one EVALSHA) and every PostgreSQL statement."""
    for instrumentor in _instrumentors():
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(tracer_provider=provider)


def uninstrument_libraries() -> None:
    for instrumentor in _instrumentors():
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


def instrument_fastapi(application: Any) -> None:
    """A server span per HTTP request (the root of a placement's trace); probes are left out."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(application, excluded_urls=UNTRACED_PATHS)
