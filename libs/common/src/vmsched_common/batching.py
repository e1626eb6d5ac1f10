"""Micro-batching: many concurrent callers, one round trip.

Consumers handle messages concurrently (up to the prefetch); each submits its item and awaits its
own result while the batcher flushes every ``max_size`` items or ``max_delay`` seconds, whichever
comes first. One flush is one PostgreSQL statement or one Redis pipeline instead of one per message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    def __init__(
        self,
        flush: Callable[[list[T]], Awaitable[Sequence[R]]],
        *,
        max_size: int = 256,
        max_delay: float = 0.005,
    ) -> None:
        self._flush = flush
        self._max_size = max_size
        self._max_delay = max_delay
        self._items: list[T] = []
        self._futures: list[asyncio.Future[R]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._items.append(item)
        self._futures.append(future)
        if len(self._items) >= self._max_size:
            self._start_flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._max_delay, self._start_flush)
        return await future

    def _start_flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._items:
            return
        items, futures = self._items, self._futures
        self._items, self._futures = [], []
        task = asyncio.create_task(self._run(items, futures))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, items: list[T], futures: list[asyncio.Future[R]]) -> None:
        try:
            results = await self._flush(items)
        except BaseException as error:  # every caller learns of the failure
            for future in futures:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        for future, result in zip(futures, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def drain(self) -> None:
        """Flush what is waiting and wait for flushes in progress (graceful shutdown)."""
        self._start_flush()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
