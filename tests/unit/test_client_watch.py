"""watch() over server-sent events, against a tiny fake ``GET /v1/events`` (the real route is not on
this branch): events in order, keep-alive comments skipped, and after a broken stream it connects
again with ``Last-Event-ID``, dropping the event the break cut off, so none is missed or seen twice."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice
from typing import ClassVar

import pytest

from vmsched_client import AsyncClient, Client, Event, NotFound
from vmsched_client.sse import SseParser
from vmsched_contract.messages import VmDeleted

EVENTS = [
    (str(n), "vm.deleted", {"schema_version": 1, "vm_id": f"00000000-0000-0000-0000-00000000000{n}"})
    for n in range(1, 6)
]


def frame(event_id: str, kind: str, data: object) -> bytes:
    return f"id: {event_id}\nevent: {kind}\ndata: {json.dumps(data)}\n\n".encode()


class FakeEvents(BaseHTTPRequestHandler):
    """The first connection sends two events, a keep-alive, half of the third, and breaks; later ones
    send what follows the Last-Event-ID they carry, and end."""

    seen: ClassVar[list[dict[str, str | None]]] = []

    def do_GET(self) -> None:
        if not self.path.startswith("/v1/events"):
            self.send_error(404)
            return
        last = self.headers.get("Last-Event-ID")
        FakeEvents.seen.append({"path": self.path, "last": last, "auth": self.headers.get("Authorization")})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        if last is None:
            self.wfile.write(b"retry: 5\n\n" + frame(*EVENTS[0]) + b": keep-alive\n\n" + frame(*EVENTS[1]))
            self.wfile.write(b'id: 3\nevent: vm.deleted\ndata: {"cut')  # the break: no blank line
        else:
            for event in EVENTS[int(last) :]:
                self.wfile.write(frame(*event))
        self.wfile.flush()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def events_url() -> Iterator[str]:
    FakeEvents.seen.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEvents)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_parser_follows_the_spec() -> None:
    parser = SseParser()
    lines = ["retry: 250", ": comment", "id: 7", "event: vm.assigned", 'data: {"a":', "data: 1}", ""]
    events = [e for e in map(parser.feed, lines) if e is not None]
    assert events == [Event(id="7", type="vm.assigned", data={"a": 1})]
    assert parser.retry_ms == 250
    assert parser.feed("data: plain text") is None
    assert parser.feed("") == Event(id="7", type="message", data="plain text")  # the id sticks, as the spec says


def test_watch_resumes_after_a_break_with_the_last_event_id(events_url: str) -> None:
    slept: list[float] = []
    with Client(events_url, "t", sleep=slept.append) as client:
        got = list(islice(client.watch(types=["vm.deleted"], project="p"), 5))
    assert [e.id for e in got] == ["1", "2", "3", "4", "5"]
    assert got[0].parse(VmDeleted).vm_id.int == 1
    assert [s["last"] for s in FakeEvents.seen[:2]] == [None, "2"]
    assert FakeEvents.seen[0]["path"] == "/v1/events?type=vm.deleted&project=p"
    assert FakeEvents.seen[0]["auth"] == "Bearer t"
    assert slept[0] == 0.005  # the server's retry: 5 (ms)


async def test_the_asyncio_watch_resumes_alike(events_url: str) -> None:
    async def no_wait(_: float) -> None:
        return None

    async with AsyncClient(events_url, "t", sleep=no_wait) as client:
        got = []
        async for event in client.watch(last_event_id="3"):
            got.append(event.id)
            if len(got) == 2:
                break
    assert got == ["4", "5"]
    assert FakeEvents.seen[0]["last"] == "3"


def test_without_reconnect_the_watch_ends_with_the_stream(events_url: str) -> None:
    with Client(events_url, "t") as client:
        assert [e.id for e in client.watch(reconnect=False)] == ["1", "2"]  # the cut-off third is dropped
    with Client(events_url + "/nowhere", "t") as lost, pytest.raises(NotFound):
        list(lost.watch(reconnect=False))


def test_vmsched_events_prints_a_json_line_per_event(events_url: str) -> None:
    from typer.testing import CliRunner

    from vmsched_client.cli.app import app

    result = CliRunner().invoke(app, ["--url", events_url, "--token", "t", "-o", "json", "events", "--count", "3"])
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["id"], line["type"]) for line in lines] == [
        ("1", "vm.deleted"),
        ("2", "vm.deleted"),
        ("3", "vm.deleted"),
    ]
    table = CliRunner().invoke(app, ["--url", events_url, "--token", "t", "events", "--since", "4", "--count", "1"])
    assert table.stdout.startswith("5  vm.deleted  {")
