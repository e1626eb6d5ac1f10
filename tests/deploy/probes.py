"""Whether a probe's path is served: by the API's own router, or by the scheduler's and gateway's
metrics server. Nothing here connects to a server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import urllib.error
import urllib.request
from collections.abc import MutableMapping
from typing import Any

from vmsched_api.app import build_app
from vmsched_runtime.metrics_server import start_metrics_server
from vmsched_runtime.settings import Settings


async def _api_status(path: str) -> int:
    """The status the API answers a GET of ``path`` with, without its lifespan (so without servers):
    a route that needs the servers fails with 500, a path the router does not know is 404."""
    app = build_app(Settings())
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"probe.test")],
        "client": ("127.0.0.1", 50000),
        "server": ("probe.test", 80),
    }
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(int(message["status"]))

    # A route that needs app.state.services raises once its 500 is sent.
    with contextlib.suppress(Exception):
        await app(scope, receive, send)
    return statuses[0]


def api_routes_path(path: str) -> bool:
    """The API's router has a GET route for ``path`` (whatever that route answers without servers)."""
    return asyncio.run(_api_status(path)) not in (404, 405)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def metrics_server_statuses(paths: list[str]) -> dict[str, int]:
    """Start the scheduler's and gateway's metrics server (vmsched_runtime.metrics_server) on a free
    loopback port, GET each path, stop it."""
    port = _free_port()
    stop = start_metrics_server(Settings(metrics_host="127.0.0.1", metrics_port=port), default_port=0)
    assert stop is not None, "start_metrics_server started nothing on a non-zero port"
    try:
        statuses = {}
        for path in paths:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                    statuses[path] = response.status
            except urllib.error.HTTPError as error:
                statuses[path] = error.code
        return statuses
    finally:
        stop()
