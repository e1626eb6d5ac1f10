"""The Prometheus endpoint of a process without an HTTP server (scheduler, gateway).

prometheus_client's own server, in a thread: it renders the registry without touching the event
loop, so a scrape never waits behind placements, and a busy loop never delays a scrape.
"""

from __future__ import annotations

from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from vmsched_common.settings import Settings


def start_metrics_server(settings: Settings) -> Callable[[], None] | None:
    """Serve ``/metrics`` on VMSCHED_METRICS_HOST:VMSCHED_METRICS_PORT; returns the function that stops it, or None
    when VMSCHED_METRICS_PORT is 0. A port in use raises OSError, which stops the service at start."""
    if settings.metrics_port == 0:
        return None
    server, thread = start_http_server(settings.metrics_port, addr=settings.metrics_host)

    def stop(server: WSGIServer = server) -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
