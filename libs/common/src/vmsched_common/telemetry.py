"""Tracing for every vmsched process: one SDK TracerProvider, its exporters chosen by the standard
``OTEL_*`` variables, and the instrumentations of the libraries a placement goes through.

The provider is installed even when nothing is exported: its trace ids are what ties the log lines
of one request together across services (see :mod:`vmsched_common.logs`), and they travel in the
AMQP headers (FastStream's ``RabbitTelemetryMiddleware``, added by ``make_broker``).

- ``OTEL_TRACES_EXPORTER``: ``otlp``, ``console``, ``none`` (comma-separated). Unset: ``otlp`` when
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set, else ``none``.
- ``OTEL_SERVICE_NAME`` overrides the service name (default ``vmsched-<service>``).
- ``OTEL_SDK_DISABLED=true``: no provider at all (no trace ids either).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from vmsched_common.settings import Settings

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


def build_tracer_provider(service: str, settings: Settings) -> TracerProvider:
    """A provider named ``vmsched-<service>`` (or OTEL_SERVICE_NAME) with the chosen exporters."""
    # Resource.create adds OTEL_RESOURCE_ATTRIBUTES; the service name is ours or OTEL_SERVICE_NAME.
    name = settings.otel_service_name or f"vmsched-{service}"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    for name in chosen_exporters(settings):
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    return provider


def setup_tracing(service: str, settings: Settings) -> TracerProvider | None:
    """Install the process's tracer provider and instrument Redis and asyncpg; call once, at start."""
    if settings.otel_sdk_disabled:
        return None
    provider = build_tracer_provider(service, settings)
    trace.set_tracer_provider(provider)
    instrument_libraries(provider)
    return provider


def _instrumentors() -> tuple[BaseInstrumentor, ...]:
    # Each is a singleton: these are the process-wide instances.
    return RedisInstrumentor(), AsyncPGInstrumentor()  # type: ignore[no-untyped-call]


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
