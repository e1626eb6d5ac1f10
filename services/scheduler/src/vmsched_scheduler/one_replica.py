"""Periodic work that one scheduler replica at a time does (the reconcile, the journal's pruning):
a Redis lock taken for the interval decides which."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)


async def every_interval_on_one_replica(
    snapshot: Snapshot, lock_name: str, interval: float, work: Callable[[], Awaitable[object]], failed: str
) -> None:
    """Run ``work`` every ``interval`` seconds on whichever replica takes ``<prefix>:<lock_name>``
    first; the lock lasts the interval, so no other replica does it meanwhile. A failure is logged
    as ``failed`` and the loop goes on (the next interval retries)."""
    owner = uuid.uuid4().hex
    lock_key = f"{snapshot.prefix}:{lock_name}"
    while True:
        try:
            if await snapshot.redis.set(lock_key, owner, nx=True, px=int(interval * 1000)):
                await work()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the loop outlives any one failure
            log.warning(failed, error=repr(error))
        await asyncio.sleep(interval)
