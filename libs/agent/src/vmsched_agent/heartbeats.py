"""One task that sends the heartbeats of any number of agents, spread evenly over time."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from vmsched_contract.messages import AgentHeartbeat
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)


class HeartbeatSource(Protocol):
    @property
    def agent_id(self) -> str: ...

    def heartbeat(self) -> AgentHeartbeat: ...


PublishHeartbeat = Callable[[AgentHeartbeat], Awaitable[None]]


@dataclass
class _Registration:
    source: HeartbeatSource
    interval: float
    generation: int
    sent: int = 0


class HeartbeatScheduler:
    """Sends each registered agent's heartbeat every ``interval`` seconds, from a single task.

    An agent's first heartbeat goes out at once (the gateway declares the agent's queue when it sees
    it); the second after a random fraction of the interval, so that agents registered together
    spread over the interval: 10,000 agents at 5 s make a steady 2,000 messages a second, not a
    burst of 10,000 every 5 s. The heartbeat is built when it is sent, so ``sent_at`` is fresh.

    Heartbeats that come due within ``batch_window`` seconds of each other go out together: waking
    up costs more than publishing, so 2,000 wake-ups a second would cost a CPU core on their own.
    """

    def __init__(
        self, publish: PublishHeartbeat, *, rng: random.Random | None = None, batch_window: float = 0.05
    ) -> None:
        self._publish = publish
        self._batch_window = batch_window
        self._rng = rng or random.Random()
        self._registrations: dict[str, _Registration] = {}
        self._due: list[tuple[float, int, str]] = []  # heap of (when, generation, agent_id)
        self._generation = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def __len__(self) -> int:
        return len(self._registrations)

    def add(self, source: HeartbeatSource, interval: float) -> None:
        """Heartbeat ``source`` now and then every ``interval`` seconds until :meth:`remove`."""
        if interval <= 0:
            raise ValueError(f"heartbeat interval must be positive, got {interval}")
        self._generation += 1
        self._registrations[source.agent_id] = _Registration(source, interval, self._generation)
        self._schedule(source.agent_id, 0.0)

    def remove(self, agent_id: str) -> None:
        """No more heartbeats for ``agent_id`` (its queued entries are skipped when they come up)."""
        self._registrations.pop(agent_id, None)

    def send_soon(self, agent_id: str) -> None:
        """Send ``agent_id``'s heartbeat now rather than at its turn (its state changed)."""
        registration = self._registrations.get(agent_id)
        if registration is not None:
            self._generation += 1
            registration.generation = self._generation
            self._schedule(agent_id, 0.0)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="vmsched-agent-heartbeats")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _schedule(self, agent_id: str, delay: float) -> None:
        registration = self._registrations[agent_id]
        when = asyncio.get_running_loop().time() + delay
        heapq.heappush(self._due, (when, registration.generation, agent_id))
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            while self._due and self._due[0][0] <= loop.time():
                when, generation, agent_id = heapq.heappop(self._due)
                registration = self._registrations.get(agent_id)
                if registration is None or registration.generation != generation:
                    continue  # removed, or rescheduled by send_soon
                await self._send(registration.source)
                if self._registrations.get(agent_id) is not registration or registration.generation != generation:
                    continue  # removed, or sent again soon, while this heartbeat was going out
                registration.sent += 1
                now = loop.time()
                next_at = when + registration.interval
                if registration.sent == 1 or next_at <= now:
                    # After the first heartbeat, or when we fell behind: a random phase, rather
                    # than bunching up with every agent registered (or late) at the same moment.
                    next_at = now + registration.interval * self._rng.uniform(0.05, 1.0)
                heapq.heappush(self._due, (next_at, registration.generation, agent_id))
            if not self._due:
                await self._wake.wait()
                continue
            pause = max(self._batch_window, self._due[0][0] - loop.time())
            if self._wake.is_set():
                continue  # an agent was added or asked to beat while we were sending
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause)

    async def _send(self, source: HeartbeatSource) -> None:
        try:
            await self._publish(source.heartbeat())
        except Exception as error:
            # A heartbeat is replaced by the next one; say so once per outage, not once per agent.
            if not self._failing:
                log.warning("heartbeats failing", error=repr(error))
            self._failing = True
        else:
            if self._failing:
                log.info("heartbeats flowing again")
            self._failing = False
