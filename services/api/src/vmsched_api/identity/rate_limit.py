"""The per-token request rate: a token bucket per token, in this process.

Each token may make ``burst`` requests at once, then ``rate`` a second. The buckets live in each API
replica's memory, not in Redis: a request pays no round trip for it, and the API keeps answering
when Redis does not. The price: behind a load balancer that spreads requests over N replicas, a
token may make up to N times ``rate`` in all; set ``VMSCHED_RATE_LIMIT`` to the total divided by
the replica count (docs/security.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

# Buckets kept at most (one per token seen lately); the least recently used goes first.
MAX_BUCKETS = 100_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        """``rate`` requests a second once ``burst`` are spent; a rate of 0 limits nothing."""
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key: str) -> float:
        """Spend one request of ``key``'s bucket: 0 if it may go now, else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                del self._buckets[next(iter(self._buckets))]
            bucket = _Bucket(tokens=float(self.burst), updated=now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        self._buckets[key] = bucket  # most recently used last
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate


def retry_after_header(wait: float) -> str:
    """Retry-After in whole seconds (HTTP allows no fraction), at least 1."""
    return str(max(1, math.ceil(wait)))
