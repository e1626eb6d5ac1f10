"""``HeartbeatScheduler``: one task, every agent's heartbeat, spread over the interval."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

from vmsched_agent.heartbeats import HeartbeatScheduler
from vmsched_contract.messages import AgentHeartbeat, Resources

CAPACITY = Resources(cpu=1, memory_mb=1, disk_gb=1)


class Source:
    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id

    def heartbeat(self) -> AgentHeartbeat:
        return AgentHeartbeat(agent_id=self.agent_id, capacity=CAPACITY)


class Recorder:
    def __init__(self) -> None:
        self.sent: dict[str, list[float]] = defaultdict(list)

    async def publish(self, heartbeat: AgentHeartbeat) -> None:
        self.sent[heartbeat.agent_id].append(asyncio.get_running_loop().time())


async def test_every_agent_beats_at_once_then_on_its_own_phase() -> None:
    recorder = Recorder()
    scheduler = HeartbeatScheduler(recorder.publish, rng=random.Random(1))
    scheduler.start()
    try:
        for index in range(50):
            scheduler.add(Source(f"h{index}"), 0.2)
        await asyncio.sleep(0.5)
    finally:
        await scheduler.stop()

    assert len(recorder.sent) == 50
    assert all(len(times) >= 2 for times in recorder.sent.values())
    seconds = sorted(times[1] for times in recorder.sent.values())
    assert seconds[-1] - seconds[0] > 0.1  # spread over the interval, not one burst


async def test_removed_agents_stop_beating_and_send_soon_beats_now() -> None:
    recorder = Recorder()
    scheduler = HeartbeatScheduler(recorder.publish)
    scheduler.start()
    try:
        scheduler.add(Source("kept"), 60.0)
        scheduler.add(Source("removed"), 0.01)
        await asyncio.sleep(0.05)
        scheduler.remove("removed")
        removed_count = len(recorder.sent["removed"])
        scheduler.send_soon("kept")
        await asyncio.sleep(0.05)
    finally:
        await scheduler.stop()

    assert len(recorder.sent["kept"]) == 2  # the first one, and the one asked for
    assert len(recorder.sent["removed"]) == removed_count
    assert len(scheduler) == 1


async def test_a_failing_publish_does_not_stop_the_heartbeats() -> None:
    calls = 0

    async def flaky(heartbeat: AgentHeartbeat) -> None:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise ConnectionError("broker away")

    scheduler = HeartbeatScheduler(flaky, batch_window=0.001)
    scheduler.start()
    try:
        scheduler.add(Source("h"), 0.01)
        await asyncio.sleep(0.1)
    finally:
        await scheduler.stop()

    assert calls > 3
