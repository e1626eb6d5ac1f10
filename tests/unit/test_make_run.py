"""``make run`` gives the scheduler and the gateway the /metrics ports the docs name (9101, 9102),
and another free one, printed, only when one of those is taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import run, stack
from vmsched_runtime.metrics_server import GATEWAY_METRICS_PORT, SCHEDULER_METRICS_PORT


def test_make_runs_scheduler_and_gateway_listen_on_the_documented_metrics_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert (SCHEDULER_METRICS_PORT, GATEWAY_METRICS_PORT) == (9101, 9102)  # what README.md curls
    monkeypatch.setattr(stack, "port_is_free", lambda port: True)
    services = run.make_run_stack(8000, "t" * 32)

    scheduler = stack.Service("scheduler-1", [], Path("scheduler.log"))
    gateway = stack.Service("gateway", [], Path("gateway.log"))

    assert services._metrics_env(scheduler, SCHEDULER_METRICS_PORT)["VMSCHED_METRICS_PORT"] == "9101"
    assert services._metrics_env(gateway, GATEWAY_METRICS_PORT)["VMSCHED_METRICS_PORT"] == "9102"
    assert scheduler.metrics_url == "http://127.0.0.1:9101/metrics"


def test_a_taken_metrics_port_is_replaced_by_a_free_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "port_is_free", lambda port: False)
    scheduler = stack.Service("scheduler-1", [], Path("scheduler.log"))

    port = run.make_run_stack(8000, "t" * 32)._metrics_env(scheduler, SCHEDULER_METRICS_PORT)["VMSCHED_METRICS_PORT"]

    assert port != "9101"
