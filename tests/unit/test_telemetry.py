"""Which exporters the standard OTEL_* variables choose, and a bad one stops the service."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vmsched_common.settings import Settings
from vmsched_common.telemetry import build_tracer_provider, chosen_exporters


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
