"""The Prometheus endpoint of a process without an HTTP server (scheduler, gateway).

prometheus_client's own server, in a thread: it renders the registry without touching the event
loop, so a scrape never waits behind placements, and a busy loop never delays a scrape.
"""

from __future__ import annotations

from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from vmsched_common.settings import Settings

# Each service's own port when VMSCHED_METRICS_PORT is unset (Prometheus' default-port registry has
# 9100 for the node exporter; these follow it).
SCHEDULER_METRICS_PORT = 9101
GATEWAY_METRICS_PORT = 9102


def start_metrics_server(settings: Settings, default_port: int) -> Callable[[], None] | None:
    """Serve ``/metrics`` on VMSCHED_METRICS_HOST:VMSCHED_METRICS_PORT (``default_port`` when unset);
    returns the function that stops it, or None when the port is 0. A port in use raises OSError,
    which stops the service at start with one line."""
    port = default_port if settings.metrics_port is None else settings.metrics_port
    if port == 0:
        return None
    try:
        server, thread = start_http_server(port, addr=settings.metrics_host)
    except OSError as error:
        raise OSError(
            f"cannot serve /metrics on {settings.metrics_host}:{port} (VMSCHED_METRICS_PORT): {error.strerror}"
        ) from None

    def stop(server: WSGIServer = server) -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
