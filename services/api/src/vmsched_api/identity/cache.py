"""The tokens one API replica has seen lately, so that a request needs no PostgreSQL round trip to
know its token, and forgotten the moment any replica revokes one.

Revocations reach every replica through PostgreSQL's LISTEN/NOTIFY: the revoking transaction sends
the token id on :data:`REVOCATIONS_CHANNEL`, PostgreSQL delivers it to every listening connection
when it commits, and this cache drops the token. The cache is used only while its listening
connection is up: from the moment that connection is lost (and until it is back, when the cache
starts empty) every request asks PostgreSQL, so a revocation sent while nobody listened cannot be
missed. An entry also ages out after :data:`MAX_AGE` seconds, a bound should all of that fail.

A lookup that began before a revocation and ends after it must not cache what it read: entries are
added only if no revocation arrived in between (the generation counter).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg

from vmsched_api.identity.store import REVOCATIONS_CHANNEL, TokenRecord
from vmsched_pg.engine import connect_directly
from vmsched_runtime.logs import get_logger

log = get_logger("vmsched_api")

MAX_AGE = 60.0
MAX_ENTRIES = 10_000
# How often the listening connection is checked (a silent network loss closes no socket).
KEEPALIVE = 5.0


class TokenCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, tuple[TokenRecord, float]] = {}
        self._generation = 0
        self.listening = False

    @property
    def generation(self) -> int:
        """Read before a lookup, handed back to :meth:`put` with its result."""
        return self._generation

    def get(self, key: str) -> TokenRecord | None:
        if not self.listening:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        record, cached_at = entry
        expired = record.expires_at is not None and record.expires_at <= datetime.now(UTC)
        if expired or self._clock() - cached_at > MAX_AGE:
            del self._entries[key]
            return None
        return record

    def put(self, key: str, record: TokenRecord, generation: int) -> None:
        if not self.listening or generation != self._generation:
            return
        if len(self._entries) >= MAX_ENTRIES:
            del self._entries[next(iter(self._entries))]  # the oldest
        self._entries[key] = (record, self._clock())

    def revoked(self, token_id: str) -> None:
        self._generation += 1
        for key in [key for key, (record, _) in self._entries.items() if str(record.id) == token_id]:
            del self._entries[key]

    def stop_using(self) -> None:
        """Until listening again: nothing is served from the cache, and it starts empty."""
        self.listening = False
        self._generation += 1
        self._entries.clear()

    def _on_notification(self, _connection: Any, _pid: int, _channel: str, payload: object) -> None:
        self.revoked(str(payload))

    def _on_lost(self, _connection: Any) -> None:
        if self.listening:
            log.warning("token revocations not heard: every request asks PostgreSQL until they are again")
        self.stop_using()

    async def listen_forever(self, database_url: str, retry_after: float = 1.0) -> None:
        """Listen for revocations, reconnecting whenever the connection is lost."""
        while True:
            connection: asyncpg.Connection | None = None
            try:
                connection = await connect_directly(database_url, timeout=10)
                connection.add_termination_listener(self._on_lost)
                await connection.add_listener(REVOCATIONS_CHANNEL, self._on_notification)
                self._generation += 1
                self.listening = True
                while True:
                    await asyncio.sleep(KEEPALIVE)
                    await connection.fetchval("SELECT 1", timeout=KEEPALIVE)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("token revocation listener lost", error=type(error).__name__)
            finally:
                self.stop_using()
                if connection is not None and not connection.is_closed():
                    connection.terminate()
            await asyncio.sleep(retry_after)
