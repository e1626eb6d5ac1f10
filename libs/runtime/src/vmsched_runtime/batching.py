"""Micro-batching: many concurrent callers, one round trip.

Consumers handle messages concurrently (up to the prefetch); each submits its item and awaits its
own result. At most ``max_in_flight`` flushes run at once, and the items that arrive while they run
wait for one to end and then go together, up to ``max_size`` a flush (a group commit): under load
the batches grow by themselves, and an item that arrives when nothing runs waits at most
``max_delay`` for company (with ``max_delay=0`` it waits for no timer: only for the callers ready in
the same turn of the event loop, as a group commit does). One flush is one PostgreSQL statement or
one Redis pipeline instead of one per message.

A timer alone (flush every few milliseconds, as many flushes at once as timers fire) keeps batches
small exactly when it matters: in the scheduler under full load, 3 items a flush on average,
because a message takes a few hundred microseconds of the event loop before it reaches the batcher.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from vmsched_runtime.metrics import BATCH_SIZE

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ItemFailed:
    """A flush's answer for one item that failed alone: its caller has ``error`` raised."""

    error: Exception


async def each_alone_on_failure(
    flush: Callable[[list[T]], Awaitable[Sequence[R]]],
    items: list[T],
    *,
    everyones: Callable[[Exception], bool],
) -> list[R | ItemFailed]:
    """``flush`` of ``items`` together; if that fails, of each item alone, so that one bad item (a
    value the server refuses, a row locked past the statement timeout) fails alone rather than with
    its batch, and again with every batch its redelivery lands in. A failure ``everyones`` says
    belongs to every item (the server away, a deadlock: the batch is worth trying again whole)
    fails the batch at once, without a round trip per item."""
    try:
        return list(await flush(items))
    except Exception as error:
        if len(items) == 1 or everyones(error):
            raise
    answers: list[R | ItemFailed] = []
    for item in items:
        try:
            (answer,) = await flush([item])
        except Exception as error:
            if everyones(error):
                raise
            answers.append(ItemFailed(error))
        else:
            answers.append(answer)
    return answers


class Batcher(Generic[T, R]):
    def __init__(
        self,
        flush: Callable[[list[T]], Awaitable[Sequence[R | ItemFailed]]],
        *,
        name: str,
        max_size: int = 256,
        max_delay: float = 0.005,
        max_in_flight: int = 1,
    ) -> None:
        """``flush`` returns one result per item, in order (an :class:`ItemFailed` is raised to its
        caller alone). ``name`` labels the batch sizes in ``vmsched_batch_size``."""
        if max_size < 1 or max_in_flight < 1:
            raise ValueError("max_size and max_in_flight must be at least 1")
        self._flush = flush
        self._sizes = BATCH_SIZE.labels(name)
        self._max_size = max_size
        self._max_delay = max_delay
        self._max_in_flight = max_in_flight
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._timer: asyncio.Handle | None = None
        self._running: set[asyncio.Task[None]] = set()

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if len(self._waiting) >= self._max_size:
            self._start_flushes()
        elif self._timer is None and len(self._running) < self._max_in_flight:
            loop = asyncio.get_running_loop()
            # No delay: start as soon as the callers that are ready in this turn of the loop joined.
            self._timer = (
                loop.call_soon(self._start_flushes)
                if self._max_delay <= 0
                else loop.call_later(self._max_delay, self._start_flushes)
            )
        return await future

    def _start_flushes(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting and len(self._running) < self._max_in_flight:
            batch, self._waiting = self._waiting[: self._max_size], self._waiting[self._max_size :]
            task = asyncio.create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._flush_ended)

    def _flush_ended(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        # What arrived meanwhile has waited a whole flush already: it goes at once.
        self._start_flushes()

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        self._sizes.observe(len(batch))
        try:
            results = await self._flush([item for item, _ in batch])
        except BaseException as error:  # every caller learns of the failure
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, ItemFailed):
                future.set_exception(result.error)
            else:
                future.set_result(result)

    async def drain(self) -> None:
        """Flush what is waiting and wait for every flush to end (graceful shutdown)."""
        self._start_flushes()
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
