"""A TCP proxy a test can cut: one :class:`Link` per (service, server) pair, all run by one
:class:`Proxies` on an event loop of its own thread (the test's loop may block in a synchronous
wait, and the services' traffic must not wait with it).

A link is in one of three states:

- ``open``: bytes pass both ways;
- ``refused``: nothing listens on the link's port (a new connection gets "connection refused") and
  every connection through it was reset: a server that is down, or a firewall that rejects;
- ``blackholed``: the sockets stay open and nothing passes, either way, on existing connections or
  on new ones (which are accepted, then hear nothing): packets dropped on the way, the case only
  timeouts and heartbeats catch. Bytes sent meanwhile are held, not lost, and pass once the link
  heals, as TCP's retransmissions would deliver them (to a peer that has not given up by then).

Healing opens the link again. Each link counts its connections, so a test can tell a client that
reconnected from one that never noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")
CHUNK = 65536


class LinkState(enum.Enum):
    OPEN = "open"
    REFUSED = "refused"
    BLACKHOLED = "blackholed"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(eq=False)
class Link:
    """One listening port forwarding to ``upstream`` (host, port); driven on the proxies' loop."""

    name: str
    upstream: tuple[str, int]
    port: int = field(default_factory=_free_port)
    state: LinkState = LinkState.OPEN
    connections: int = 0  # accepted since the link was made
    _server: asyncio.Server | None = None
    _flowing: asyncio.Event = field(default_factory=asyncio.Event)
    _open: set[asyncio.StreamWriter] = field(default_factory=set)

    def url(self, url: str) -> str:
        """``url`` with this link's address in place of the upstream's."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    async def listen(self) -> None:
        self._flowing.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

    async def set(self, state: LinkState) -> None:
        if state is self.state:
            return
        if self.state is LinkState.REFUSED:
            await self.listen()
        self.state = state
        if state is LinkState.OPEN:
            self._flowing.set()
        elif state is LinkState.BLACKHOLED:
            self._flowing.clear()
        else:
            self._flowing.set()  # what is held is thrown away with the connections below
            await self._stop_listening()
            for writer in list(self._open):
                writer.transport.abort()  # a reset, as from a server that went away
            self._open.clear()

    async def close(self) -> None:
        await self._stop_listening()
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(client_writer)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            await self._flowing.wait()  # accepted during a blackhole: connect on only once healed
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            self._open.add(upstream_writer)
            await asyncio.gather(self._pump(client_reader, upstream_writer), self._pump(upstream_reader, client_writer))
        except (ConnectionError, OSError):
            pass
        finally:
            for writer in (client_writer, upstream_writer):
                if writer is not None:
                    self._open.discard(writer)
                    writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await self._flowing.wait()
            data = await reader.read(CHUNK)
            if not data:
                break
            await self._flowing.wait()  # read just as the link went dark: held until it heals
            writer.write(data)
            await writer.drain()
        # One side closed: close the other (both pumps end).
        writer.transport.abort()


class Proxies:
    """The links of a test, served on a thread of their own; call its methods from any thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxies", daemon=True)
        self._thread.start()
        self.links: dict[str, Link] = {}

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def add(self, name: str, url: str) -> Link:
        """A link named ``name`` to the server of ``url`` (its host and port), listening now."""
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"{url!r} names no host and port")
        upstream = (parts.hostname, parts.port)

        async def make() -> Link:
            link = Link(name, upstream)
            await link.listen()
            return link

        link = self._run(make())
        self.links[name] = link
        return link

    def refuse(self, name: str) -> None:
        self._run(self.links[name].set(LinkState.REFUSED))

    def blackhole(self, name: str) -> None:
        self._run(self.links[name].set(LinkState.BLACKHOLED))

    def heal(self, name: str) -> None:
        self._run(self.links[name].set(LinkState.OPEN))

    @contextlib.contextmanager
    def cut(self, name: str, state: LinkState) -> Iterator[Link]:
        """``name`` refused or blackholed for the block; healed afterwards, whatever happens."""
        self._run(self.links[name].set(state))
        try:
            yield self.links[name]
        finally:
            self.heal(name)

    def close(self) -> None:
        async def close_all() -> None:
            for link in self.links.values():
                await link.close()

        with contextlib.suppress(Exception):
            self._run(close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
