"""Readiness (``/readyz``) of a service without an HTTP server of its own (the scheduler, the gateway):
whether each server it needs answers now, each named, and why not when one does not.

A check is asked of every server at once, each with a timeout of its own: under a partition that
drops packets (the socket open, nothing answering) a question waits for no answer, and a probe must
still hear "not ready" in about two seconds. The verdict is kept for a moment and one check runs at
a time, so that probes asked faster than that (several kubelets, a curl loop) cannot pile questions
up on a server that does not answer. The adapters say how their server is asked (the broker:
``vmsched_amqp.readiness``; PostgreSQL: ``vmsched_pg.engine.database_check``; Redis:
``vmsched_redis.connections.redis_check``), so that this package needs none of their clients.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from vmsched_runtime.reachability import why

# Returns None when its server is ready, else why it is not; raising says why as well.
Check = Callable[[], Awaitable[str | None]]

READY = "ok"
# Seconds each check may take: all run at once, so a verdict takes no longer than the slowest.
CHECK_TIMEOUT = 1.5
# Seconds a verdict answers every probe before a new check is made.
FRESH_FOR = 1.5
# Seconds the HTTP thread waits for a verdict from the event loop before saying the loop is stuck.
ANSWER_WITHIN = 2.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """Each check's answer: :data:`READY`, or why it is not."""

    checks: Mapping[str, str]
    at: float = 0.0  # monotonic seconds when it was made

    @property
    def ready(self) -> bool:
        return all(answer == READY for answer in self.checks.values())

    def body(self) -> bytes:
        return json.dumps(dict(self.checks)).encode()


@dataclass(frozen=True, slots=True)
class _Question:
    task: asyncio.Future[str | None]
    asked_at: float


def _retrieve(task: asyncio.Future[str | None]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a question nobody waits for any more logs nothing when it fails


@dataclass
class Readiness:
    """The named checks of one service, asked together, the last verdict kept for ``fresh_for``."""

    checks: Mapping[str, Check]
    timeout: float = CHECK_TIMEOUT
    fresh_for: float = FRESH_FOR
    clock: Callable[[], float] = time.monotonic
    last: Verdict | None = None
    _running: asyncio.Future[Verdict] | None = field(default=None, repr=False)
    _questions: dict[str, _Question] = field(default_factory=dict, repr=False)

    async def verdict(self) -> Verdict:
        """The last verdict while fresh, else a new one; callers that ask while a check runs share it."""
        last = self.last
        if last is not None and self.clock() - last.at < self.fresh_for:
            return last
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._check())
        # Shielded: a caller that gives up (a probe's HTTP timeout) does not cancel the others' check.
        return await asyncio.shield(self._running)

    async def _check(self) -> Verdict:
        names = list(self.checks)
        answers = await asyncio.gather(*(self._ask(name) for name in names))
        self.last = Verdict(dict(zip(names, answers, strict=True)), at=self.clock())
        return self.last

    async def _ask(self, name: str) -> str:
        # A question still unanswered from an earlier check is waited for again, not asked anew, and
        # never cancelled: a client cancelled mid-statement may itself wait on the silent server to
        # clean up (SQLAlchemy's rollback), and each probe would leave one more such question behind.
        question = self._questions.get(name)
        if question is None or question.task.done():
            task = asyncio.ensure_future(self.checks[name]())
            task.add_done_callback(_retrieve)
            question = self._questions[name] = _Question(task, self.clock())
        done, _ = await asyncio.wait({question.task}, timeout=self.timeout)
        if not done:
            return f"no answer for {self.clock() - question.asked_at:.1f} s"
        try:
            reason = question.task.result()
        except Exception as error:
            return why(error)
        return READY if reason is None else reason

    def from_thread(self, loop: asyncio.AbstractEventLoop, within: float = ANSWER_WITHIN) -> Verdict:
        """:meth:`verdict` for a thread other than ``loop``'s (the HTTP server's), in ``within``
        seconds at most: a loop too busy or stuck to answer in time makes a verdict of its own."""
        last = self.last
        if last is not None and self.clock() - last.at < self.fresh_for:
            return last  # without waking the loop
        future = asyncio.run_coroutine_threadsafe(self.verdict(), loop)
        try:
            return future.result(timeout=within)
        except concurrent.futures.TimeoutError:
            future.cancel()
            stuck = Verdict({"event_loop": f"no answer within {within:g} s"}, at=self.clock())
            self.last = stuck  # the next probes within fresh_for hear the same, without queueing on the loop
            return stuck


def nothing_to_check() -> Verdict:
    """The verdict of a process that needs no server: ready."""
    return Verdict({})
