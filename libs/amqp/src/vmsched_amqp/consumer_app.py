"""A consumer service's FastStream app, and the periodic duties it runs beside its consumers, stopped together at
shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from functools import partial
from typing import Any

from faststream import FastStream
from faststream.rabbit import RabbitBroker

from vmsched_amqp.broker import declare_topology
from vmsched_amqp.lean_consumer import LeanConsumer
from vmsched_amqp.readiness import broker_check, consumers_check
from vmsched_runtime.heap import freeze_startup_objects
from vmsched_runtime.metrics_server import LoopPulse, start_metrics_server
from vmsched_runtime.readiness import Check, Readiness
from vmsched_runtime.settings import Settings


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, duty: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(duty))

    async def stop(self) -> None:
        """Cancel every duty and wait until each has ended."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()


def consumer_app(
    broker: RabbitBroker,
    *,
    on_ready: Callable[[BackgroundTasks], Awaitable[None]],
    closers: Sequence[Callable[[], Awaitable[object]]],
    logger: Any,
    settings: Settings | None = None,
    metrics_port: int = 0,
    checks: Mapping[str, Check] | None = None,
    lean_consumers: Sequence[LeanConsumer[Any]] = (),
) -> FastStream:
    """A consumer service's FastStream app: before the first message, serve /metrics, /healthz and
    /readyz (with ``settings``: on VMSCHED_METRICS_PORT, else ``metrics_port``), connect, declare the
    topology and call ``on_ready`` (which may start background duties), then freeze what startup made
    (see :mod:`vmsched_runtime.heap`); at shutdown, once consumers stopped, stop the duties and run
    ``closers`` in order.

    /readyz asks the broker (connected and answering), whether the broker's subscribers and
    ``lean_consumers`` consume, and each of ``checks`` (the service's other servers)."""
    background = BackgroundTasks()
    stop_metrics: list[Callable[[], None]] = []

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        try:
            yield
        finally:
            await background.stop()
            for close in closers:
                await close()
            for stop in stop_metrics:
                stop()

    async def before_consuming() -> None:
        if settings is not None:
            pulse = LoopPulse()
            background.start(pulse.run())
            readiness = Readiness(
                {
                    "broker": broker_check(broker),
                    "consumers": consumers_check(broker, lean_consumers),
                    **(checks or {}),
                }
            )
            ready = partial(readiness.from_thread, asyncio.get_running_loop())
            if (stop := start_metrics_server(settings, metrics_port, alive=pulse.alive, ready=ready)) is not None:
                stop_metrics.append(stop)
        await broker.connect()
        await declare_topology(broker)
        await on_ready(background)
        freeze_startup_objects()

    return FastStream(broker, lifespan=lifespan, on_startup=[before_consuming], logger=logger)
