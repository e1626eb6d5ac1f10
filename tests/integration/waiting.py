"""Waiting on a condition with a deadline: the only way tests here wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], *, timeout: float, what: str, interval: float = 0.1
) -> T:
    """Call ``probe`` until ``accept`` holds for its result; TimeoutError with the last result otherwise."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if accept(last):
            return last
        await asyncio.sleep(interval)
    raise TimeoutError(
        f"timed out after {timeout:.0f}s waiting for {what}; last seen: {getattr(last, 'text', last)!r:.3000}"
    )
