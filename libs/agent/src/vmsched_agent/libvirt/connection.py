"""One libvirt connection for the agent: its blocking calls run on worker threads (the agent's event
loop never waits on libvirt), and a lost connection is noticed and reopened.

libvirt connections are thread-safe (since libvirt 0.6), so several calls may run at once: a create
does not wait behind a live migration of minutes. A call that finds the connection gone marks it
lost; :meth:`LibvirtConnection.watch` (a task of its own) then reopens it, first at once and then
with a growing pause, and checks it every ``check_interval`` seconds meanwhile (libvirt's own
keepalive needs an event loop implementation in the process; a cheap probe does the same here).
Whoever cares (the agent's heartbeats) is told of each change through ``on_change``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from vmsched_agent.libvirt.ports import HostError, LibvirtHost, OpensHosts
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)

S = TypeVar("S")
T = TypeVar("T")
ChangeListener = Callable[[bool, str], None]  # (connected, why)

# The first pause before reopening a lost connection; it doubles up to reconnect_max_delay.
FIRST_RETRY_DELAY = 0.5


class Unreachable(HostError):
    """The connection is lost and not reopened yet: nothing was asked of libvirt."""


class LibvirtConnection:
    """The agent's libvirt connection to ``uri``, opened with ``opener`` (vmsched_agent.libvirt.host's
    ``open_host`` for real libvirt). ``workers``: libvirt calls that may run at once."""

    def __init__(
        self,
        uri: str,
        opener: OpensHosts,
        *,
        workers: int = 4,
        check_interval: float = 5.0,
        reconnect_max_delay: float = 30.0,
        on_change: ChangeListener | None = None,
    ) -> None:
        self.uri = uri
        self._opener = opener
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="libvirt")
        self.check_interval = check_interval
        self.reconnect_max_delay = reconnect_max_delay
        self.on_change = on_change
        self._host: LibvirtHost | None = None
        self._lost_because = "not opened yet"
        self._lost = asyncio.Event()
        self.reconnections = 0

    @property
    def connected(self) -> bool:
        return self._host is not None

    @property
    def lost_because(self) -> str | None:
        """Why the connection is down (libvirt's message), None while it is up."""
        return None if self._host is not None else self._lost_because

    async def open(self) -> None:
        """Open the connection (raises :class:`HostError` with libvirt's message)."""
        self._host = await self._in_thread(self._opener, self.uri)

    async def call(self, work: Callable[[LibvirtHost], T]) -> T:
        """``work(host)`` on a worker thread. Raises :class:`Unreachable` while the connection is
        lost, and whatever ``work`` raises (a :class:`HostError` that says the connection is gone
        marks it lost, so that :meth:`watch` reopens it)."""
        host = self._host
        if host is None:
            raise Unreachable(f"libvirt at {self.uri} is unreachable: {self._lost_because}", connection_lost=True)
        try:
            return await self._in_thread(work, host)
        except HostError as error:
            if error.connection_lost:
                self._mark_lost(host, str(error))
            raise

    async def watch(self) -> None:
        """Until cancelled: probe the connection every ``check_interval`` seconds, reopen it when
        lost (at once, then with a pause doubling up to ``reconnect_max_delay``)."""
        delay = FIRST_RETRY_DELAY
        while True:
            host = self._host
            if host is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._lost.wait(), self.check_interval)
                if self._host is host and not await self._in_thread(lambda h: h.alive(), host):
                    self._mark_lost(host, "the connection stopped answering")
                delay = FIRST_RETRY_DELAY
                continue
            try:
                self._host = await self._in_thread(self._opener, self.uri)
            except HostError as error:
                self._lost_because = str(error)
                log.warning("libvirt still unreachable", uri=self.uri, error=str(error), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.reconnect_max_delay)
                continue
            self.reconnections += 1
            log.info("libvirt reconnected", uri=self.uri)
            self._notify(True, "reconnected")

    async def close(self) -> None:
        host, self._host = self._host, None
        self._lost_because = "closed"
        if host is not None:
            await self._in_thread(lambda h: h.close(), host)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _mark_lost(self, host: LibvirtHost, why: str) -> None:
        if self._host is not host:
            return  # another call noticed first, or it was reopened since
        self._host = None
        self._lost_because = why
        self._lost.set()
        self._lost = asyncio.Event()
        log.warning("libvirt connection lost", uri=self.uri, error=why)
        # What is left of it (the reopened one is a new connection), off the event loop.
        self._executor.submit(host.close)
        self._notify(False, why)

    def _notify(self, connected: bool, why: str) -> None:
        if self.on_change is not None:
            self.on_change(connected, why)

    async def _in_thread(self, function: Callable[[S], T], argument: S) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, argument)
