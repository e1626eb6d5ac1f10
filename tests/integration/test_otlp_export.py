"""OTLP when an endpoint is set: a real API process sends its spans to a collector (a stand-in that
decodes what it receives), named by service."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from devtools.stack import Stack, free_port, wait_for
from tests.integration.conftest import stack_env
from tests.integration.waiting import eventually
from tests.servers import Servers


class Collector:
    """Accepts OTLP/HTTP exports and keeps (service name, span name) of every span."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str]] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.paths.append(self.path)
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    service = next(
                        (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"),
                        "",
                    )
                    for scope_spans in resource_spans.scope_spans:
                        collector.spans.extend((service, span.name) for span in scope_spans.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *_: object) -> None:  # quiet
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @contextlib.contextmanager
    def running(self) -> Iterator[Collector]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join()


async def test_an_api_with_an_otlp_endpoint_exports_its_spans(servers: Servers, tmp_path: Path) -> None:
    collector = Collector()
    env = stack_env(
        servers,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",  # milliseconds between exports, instead of 5 s
    )
    stack = Stack(env=env, log_dir=tmp_path, api_port=free_port())
    with collector.running():
        try:
            api = stack.start_api()
            wait_for(api.is_ready, 60, "the API to be ready")
            async with stack.async_client() as client:
                assert (await client.get("/v1/hosts")).status_code == 200
            await eventually(
                _spans(collector),
                lambda spans: ("vmsched-api", "GET /v1/hosts") in spans,
                timeout=20,
                what="the API's span at the collector",
            )
        finally:
            stack.stop()
    assert set(collector.paths) == {"/v1/traces"}
    assert ("vmsched-api", "GET /readyz") not in collector.spans, "probes are not traced"


def _spans(collector: Collector) -> Callable[[], Awaitable[list[tuple[str, str]]]]:
    async def probe() -> list[tuple[str, str]]:
        return list(collector.spans)

    return probe
