"""The scheduler's and gateway's HTTP endpoint: /metrics, and a /healthz that follows the event loop."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from devtools.stack import free_port
from vmsched_runtime.metrics_server import start_metrics_server
from vmsched_runtime.settings import Settings


def status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.parametrize(("alive", "expected"), [(True, 200), (False, 503)])
def test_healthz_says_whether_the_event_loop_still_ticks(alive: bool, expected: int) -> None:
    port = free_port()
    stop = start_metrics_server(Settings(metrics_port=port), default_port=0, alive=lambda: alive)
    assert stop is not None
    try:
        assert status(port, "/healthz") == expected
        assert status(port, "/metrics") == 200
    finally:
        stop()


def test_the_port_defaults_to_the_services_own_and_zero_turns_it_off() -> None:
    port = free_port()
    stop = start_metrics_server(Settings(), default_port=port)
    assert stop is not None
    try:
        assert status(port, "/metrics") == 200
    finally:
        stop()
    assert start_metrics_server(Settings(metrics_port=0), default_port=port) is None


def test_a_port_in_use_is_refused_naming_the_setting() -> None:
    port = free_port()
    stop = start_metrics_server(Settings(metrics_port=port), default_port=0)
    try:
        with pytest.raises(OSError, match="VMSCHED_METRICS_PORT"):
            start_metrics_server(Settings(metrics_port=port), default_port=0)
    finally:
        assert stop is not None
        stop()
