"""The HTTP endpoint of a process without an HTTP server of its own (scheduler, gateway):
``/metrics`` for Prometheus, ``/healthz`` for a liveness probe and ``/readyz`` for a readiness probe.

It runs in a thread (prometheus_client's WSGI app on a threading server): it renders the registry
without touching the event loop, so a scrape never waits behind placements. ``/healthz`` answers
503 once the event loop has not ticked for ``LOOP_STALL_LIMIT`` seconds: a process whose loop is
stuck answers nothing else either, and its orchestrator should restart it. ``/readyz`` answers 200
while every server the process needs answers, else 503; both with a JSON body naming each server and
why it is not ready (:mod:`vmsched_runtime.readiness`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

from vmsched_runtime.readiness import Verdict, nothing_to_check
from vmsched_runtime.settings import ENV_PREFIX, Settings

# Each service's own port when VMSCHED_METRICS_PORT is unset (Prometheus' default-port registry has
# 9100 for the node exporter; these follow it).
SCHEDULER_METRICS_PORT = 9101
GATEWAY_METRICS_PORT = 9102
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
LOOP_TICK = 1.0
LOOP_STALL_LIMIT = 30.0


class LoopPulse:
    """When the event loop last ran a tick; read from the server's thread."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    async def run(self) -> None:
        while True:
            self.last = time.monotonic()
            await asyncio.sleep(LOOP_TICK)

    def alive(self) -> bool:
        return time.monotonic() - self.last < LOOP_STALL_LIMIT


def _app(alive: Callable[[], bool], ready: Callable[[], Verdict]) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == HEALTH_PATH:
            ok = alive()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok\n" if ok else b"event loop stalled\n"]
        if path == READY_PATH:
            verdict = ready()
            start_response(
                "200 OK" if verdict.ready else "503 Service Unavailable", [("Content-Type", "application/json")]
            )
            return [verdict.body()]
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    return app


def start_metrics_server(
    settings: Settings,
    default_port: int,
    *,
    alive: Callable[[], bool] = lambda: True,
    ready: Callable[[], Verdict] = nothing_to_check,
) -> Callable[[], None] | None:
    """Serve ``/metrics``, ``/healthz`` (``alive``) and ``/readyz`` (``ready``, called on the server's
    threads) on VMSCHED_METRICS_HOST:VMSCHED_METRICS_PORT (``default_port`` when unset); returns the
    function that stops it, or None when the port is 0. A port in use raises OSError naming the
    setting, which stops the service at start with one line."""
    port = default_port if settings.metrics_port is None else settings.metrics_port
    if port == 0:
        return None
    try:
        server = make_server(
            settings.metrics_host, port, _app(alive, ready), ThreadingWSGIServer, handler_class=_SilentHandler
        )
    except OSError as error:
        raise OSError(
            f"cannot serve /metrics on {settings.metrics_host}:{port} ({ENV_PREFIX}METRICS_PORT): {error.strerror}"
        ) from None
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
