"""When to send a request again: a 429 or a 503, after the server's ``Retry-After`` when it gives
one, else after an exponential backoff. Pure: the clients do the sleeping."""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from datetime import UTC, datetime

RETRIED_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` sends at most; waits of ``base`` * 2^n seconds, never more than ``cap``."""

    attempts: int = 5
    base: float = 0.25
    cap: float = 30.0

    def delay(
        self, attempt: int, status_code: int, retry_after: str | None, now: datetime | None = None
    ) -> float | None:
        """Seconds to wait before sending again after the ``attempt``-th send (from 1) was answered
        ``status_code``; None: do not send again."""
        if status_code not in RETRIED_STATUSES or attempt >= self.attempts:
            return None
        asked = parse_retry_after(retry_after, now or datetime.now(UTC))
        if asked is not None:
            return min(asked, self.cap)
        return float(min(self.base * 2 ** (attempt - 1), self.cap))


NO_RETRIES = RetryPolicy(attempts=1)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` in seconds: a number of seconds, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - now).total_seconds(), 0.0)
