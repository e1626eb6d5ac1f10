"""The micro-batcher: concurrent callers share one flush and each gets its own result."""

from __future__ import annotations

import asyncio

import pytest

from vmsched_common.batching import Batcher


async def test_concurrent_submissions_share_one_flush() -> None:
    flushes: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        flushes.append(items)
        return [item * 10 for item in items]

    batcher = Batcher(flush, max_size=100, max_delay=0.01)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(5)))
    assert results == [0, 10, 20, 30, 40]
    assert flushes == [[0, 1, 2, 3, 4]]


async def test_a_full_batch_flushes_without_waiting_for_the_delay() -> None:
    async def flush(items: list[int]) -> list[int]:
        return items

    batcher = Batcher(flush, max_size=3, max_delay=60.0)
    results = await asyncio.wait_for(asyncio.gather(*(batcher.submit(i) for i in range(3))), timeout=5)
    assert results == [0, 1, 2]


async def test_a_failed_flush_fails_every_caller_of_that_batch() -> None:
    async def flush(items: list[int]) -> list[int]:
        raise ConnectionError("database unreachable")

    batcher = Batcher(flush, max_size=10, max_delay=0.001)
    outcomes = await asyncio.gather(batcher.submit(1), batcher.submit(2), return_exceptions=True)
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)


async def test_drain_flushes_what_is_waiting() -> None:
    seen: list[int] = []

    async def flush(items: list[int]) -> list[None]:
        seen.extend(items)
        return [None] * len(items)

    batcher: Batcher[int, None] = Batcher(flush, max_size=10, max_delay=60.0)
    pending = asyncio.ensure_future(batcher.submit(7))
    await asyncio.sleep(0)
    await batcher.drain()
    await asyncio.wait_for(pending, timeout=5)
    assert seen == [7]


@pytest.mark.parametrize("size", [1, 7, 64])
async def test_every_item_gets_its_own_result_in_order(size: int) -> None:
    async def flush(items: list[int]) -> list[int]:
        return [-item for item in items]

    batcher = Batcher(flush, max_size=size, max_delay=0.001)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(100)))
    assert results == [-i for i in range(100)]
