"""A load generator's HTTP/1.1 client that costs next to nothing: one keep-alive connection, requests
written as prepared bytes, answers read by their Content-Length.

httpx spends 1-2 ms of CPU on a request (docs/performance.md: the load generator's column), as much
as the API it measures; on a 2-core machine that shares every process, the load generator's CPU is
taken from the system under test. This client spends tens of microseconds. It speaks only what the
benchmarks send: a JSON POST, a GET or a DELETE, and an answer with a Content-Length (as uvicorn sends).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class WireClient:
    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self._head = f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self._reader, self._writer

    async def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> Answer:
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        request = (
            f"POST {path} HTTP/1.1\r\n{self._head}{extra}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        return await self._exchange(request)

    async def get(self, path: str) -> Answer:
        return await self._exchange(f"GET {path} HTTP/1.1\r\n{self._head}\r\n".encode())

    async def delete(self, path: str) -> Answer:
        return await self._exchange(f"DELETE {path} HTTP/1.1\r\n{self._head}Content-Length: 0\r\n\r\n".encode())

    async def _exchange(self, request: bytes) -> Answer:
        for attempt in (1, 2):
            reader, writer = await self._connection()
            try:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                break
            except (ConnectionError, asyncio.IncompleteReadError):
                # The server closed an idle keep-alive connection: once more on a fresh one.
                await self.aclose()
                if attempt == 2:
                    raise
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        closing = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            lowered = name.strip().lower()
            if lowered == b"content-length":
                length = int(value)
            elif lowered == b"connection" and value.strip().lower() == b"close":
                closing = True
        body = await reader.readexactly(length) if length else b""
        if closing:
            await self.aclose()
        return Answer(status, body)

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None
