"""Which exporters the standard OTEL_* variables choose, and a bad one stops the service."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ValidationError

from vmsched_runtime.settings import Settings
from vmsched_runtime.telemetry import build_tracer_provider, chosen_exporters, export_to


@pytest.mark.parametrize(
    ("variables", "exporters"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
    ],
)
def test_exporters_follow_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], exporters: list[str]
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert chosen_exporters(Settings()) == exporters


def test_an_unknown_exporter_is_refused_naming_the_valid_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "jaeger")
    with pytest.raises(ValidationError, match="unknown exporter jaeger; valid: otlp, console, none"):
        Settings()


def test_the_service_name_defaults_per_service_and_otel_service_name_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert build_tracer_provider("scheduler", Settings()).resource.attributes["service.name"] == "vmsched-scheduler"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "placement-eu1")
    assert build_tracer_provider("scheduler", Settings()).resource.attributes["service.name"] == "placement-eu1"


def test_spans_are_recorded_only_once_an_exporter_is_attached_but_always_carry_a_trace_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER"):
        monkeypatch.delenv(name, raising=False)
    provider = build_tracer_provider("api", Settings())
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("unexported") as span, tracer.start_as_current_span("child") as child:
        assert not span.is_recording()
        assert span.get_span_context().is_valid
        assert child.get_span_context().trace_id == span.get_span_context().trace_id
    exporter = InMemorySpanExporter()
    export_to(provider, SimpleSpanProcessor(exporter))
    with tracer.start_as_current_span("exported") as span:
        assert span.is_recording()
    assert [s.name for s in exporter.get_finished_spans()] == ["exported"]
