"""The micro-batcher: concurrent callers share one flush and each gets its own result."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest

from vmsched_runtime.batching import Batcher, each_alone_on_failure


async def test_concurrent_submissions_share_one_flush() -> None:
    flushes: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        flushes.append(items)
        return [item * 10 for item in items]

    batcher = Batcher(flush, name="test", max_size=100, max_delay=0.01)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(5)))
    assert results == [0, 10, 20, 30, 40]
    assert flushes == [[0, 1, 2, 3, 4]]


async def test_a_full_batch_flushes_without_waiting_for_the_delay() -> None:
    async def flush(items: list[int]) -> list[int]:
        return items

    batcher = Batcher(flush, name="test", max_size=3, max_delay=60.0)
    results = await asyncio.wait_for(asyncio.gather(*(batcher.submit(i) for i in range(3))), timeout=5)
    assert results == [0, 1, 2]


async def test_a_failed_flush_fails_every_caller_of_that_batch() -> None:
    async def flush(items: list[int]) -> list[int]:
        raise ConnectionError("database unreachable")

    batcher = Batcher(flush, name="test", max_size=10, max_delay=0.001)
    outcomes = await asyncio.gather(batcher.submit(1), batcher.submit(2), return_exceptions=True)
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)


async def test_drain_flushes_what_is_waiting() -> None:
    seen: list[int] = []

    async def flush(items: list[int]) -> list[None]:
        seen.extend(items)
        return [None] * len(items)

    batcher: Batcher[int, None] = Batcher(flush, name="test", max_size=10, max_delay=60.0)
    pending = asyncio.ensure_future(batcher.submit(7))
    await asyncio.sleep(0)
    await batcher.drain()
    await asyncio.wait_for(pending, timeout=5)
    assert seen == [7]


@pytest.mark.parametrize("size", [1, 7, 64])
async def test_every_item_gets_its_own_result_in_order(size: int) -> None:
    async def flush(items: list[int]) -> list[int]:
        return [-item for item in items]

    batcher = Batcher(flush, name="test", max_size=size, max_delay=0.001)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(100)))
    assert results == [-i for i in range(100)]


async def test_items_that_arrive_during_a_flush_go_together_in_the_next() -> None:
    flushes: list[list[int]] = []
    first_started = asyncio.Event()
    release_first = asyncio.Event()

    async def flush(items: list[int]) -> list[int]:
        flushes.append(items)
        if len(flushes) == 1:
            first_started.set()
            await release_first.wait()
        return items

    batcher = Batcher(flush, name="test", max_size=100, max_delay=0.001)
    first = asyncio.ensure_future(batcher.submit(0))
    await first_started.wait()
    # Arriving one by one while the first flush runs, far apart compared with max_delay.
    later = []
    for i in range(1, 6):
        later.append(asyncio.ensure_future(batcher.submit(i)))
        await asyncio.sleep(0.003)
    assert flushes == [[0]]  # no second flush while the first runs (max_in_flight=1)
    release_first.set()
    assert await asyncio.wait_for(asyncio.gather(first, *later), timeout=5) == [0, 1, 2, 3, 4, 5]
    assert flushes == [[0], [1, 2, 3, 4, 5]]


async def test_no_more_flushes_run_at_once_than_allowed() -> None:
    running = 0
    most = 0

    async def flush(items: list[int]) -> list[int]:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.002)
        running -= 1
        return items

    batcher = Batcher(flush, name="test", max_size=3, max_delay=0.0005, max_in_flight=2)
    results = await asyncio.wait_for(asyncio.gather(*(batcher.submit(i) for i in range(50))), timeout=10)
    assert results == list(range(50))
    assert most == 2


def test_a_batcher_needs_room_for_one_item_and_one_flush() -> None:
    async def flush(items: list[int]) -> list[int]:
        return items

    with pytest.raises(ValueError, match="at least 1"):
        Batcher(flush, name="test", max_size=0)
    with pytest.raises(ValueError, match="at least 1"):
        Batcher(flush, name="test", max_in_flight=0)


async def test_with_no_delay_a_lone_item_waits_for_no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone request finds nothing in flight and starts at once: no timer is ever set."""
    loop = asyncio.get_running_loop()

    def no_timers(*_: object) -> asyncio.TimerHandle:
        raise AssertionError("a timer was set")

    monkeypatch.setattr(loop, "call_later", no_timers)
    flushes: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        flushes.append(items)
        await asyncio.sleep(0)
        return items

    batcher = Batcher(flush, name="test", max_size=100, max_delay=0.0)
    assert await batcher.submit(1) == 1
    # Arriving together (in one turn of the loop), they go together; then the next lone one alone.
    assert await asyncio.gather(*(batcher.submit(n) for n in (2, 3, 4))) == [2, 3, 4]
    assert await batcher.submit(5) == 5
    assert flushes == [[1], [2, 3, 4], [5]]


class Refused(Exception):
    """What the server says of one bad item (a value it does not take)."""


async def test_one_bad_item_fails_alone_and_the_others_of_its_batch_go_through() -> None:
    flushes: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        flushes.append(items)
        if 13 in items:
            raise Refused("13 is refused")
        return [item * 10 for item in items]

    batcher = Batcher(
        partial(each_alone_on_failure, flush, everyones=lambda error: isinstance(error, ConnectionError)),
        name="test",
        max_size=100,
        max_delay=0.01,
    )
    outcomes = await asyncio.gather(*(batcher.submit(i) for i in (11, 12, 13, 14)), return_exceptions=True)

    assert outcomes[:2] == [110, 120]
    assert isinstance(outcomes[2], Refused)
    assert outcomes[3] == 140
    assert flushes == [[11, 12, 13, 14], [11], [12], [13], [14]]  # together, then each alone


async def test_a_failure_of_everyones_fails_the_batch_without_a_try_per_item() -> None:
    flushes: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        flushes.append(items)
        raise ConnectionError("database unreachable")

    batcher = Batcher(
        partial(each_alone_on_failure, flush, everyones=lambda error: isinstance(error, ConnectionError)),
        name="test",
        max_size=100,
        max_delay=0.01,
    )
    outcomes = await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)

    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)
    assert flushes == [[0, 1, 2]]
