"""Fenced hosts in PostgreSQL (docs/operations.md#fencing): fencing a host (an operator's, or the
fence command's success), unfencing it, and what the gateway records while it tries to fence a lost
host: each try (one replica at a time), its failure, and when the next try is due. A fenced host's
status is ``fenced``: the schedulers' guard takes only ``online`` hosts, so nothing is placed on it,
and the heartbeat upsert keeps the status while ``fenced_at`` is set."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.fencing import FencedBy
from vmsched_contract.messages import HostStatus
from vmsched_domain.records import HostRecord
from vmsched_pg.engine import retry_on_dead_connection
from vmsched_pg.rows import HOST_COLUMNS, HOST_FIELDS, columns, host_from_row

_FENCE = text(
    f"""
    WITH before AS (SELECT id, fenced_at FROM hosts WHERE id = :id FOR UPDATE)
    UPDATE hosts h
       SET fenced_at = coalesce(h.fenced_at, now()), fenced_by = coalesce(h.fenced_by, :by),
           status = '{HostStatus.FENCED.value}', fence_error = NULL
      FROM before WHERE h.id = before.id
    RETURNING {columns(HOST_FIELDS, "h")}, before.fenced_at IS NULL AS newly
    """
)
# Unfenced, a host is online only if its agent is heard from (the next heartbeat says its own status).
_UNFENCE = text(
    f"""
    UPDATE hosts
       SET fenced_at = NULL, fenced_by = NULL, fence_tried_at = NULL, fence_error = NULL,
           status = CASE WHEN last_heartbeat >= now() - make_interval(secs => :offline_after)
                         THEN '{HostStatus.ONLINE.value}' ELSE '{HostStatus.OFFLINE.value}' END
     WHERE id = :id AND fenced_at IS NOT NULL
    RETURNING {HOST_COLUMNS}
    """
)
_EXISTS = text("SELECT EXISTS (SELECT 1 FROM hosts WHERE id = :id)")
# One gateway replica acts on a lost host at a time: the first of a silence (fence_tried_at cleared by
# a heartbeat or an unfence), or a retry once fence_retry_at has passed. The try's attempt number is
# counted afresh in a new silence; fence_retry_at is set at once to when the try must have ended (the
# command's timeout and more), so that a gateway that dies in the middle of it leaves the next try due
# then, to whichever replica comes first. NULL (no lease): never again in this silence.
_CLAIM_TRY = text(
    f"""
    UPDATE hosts
       SET fence_attempts = CASE WHEN fence_tried_at IS NULL THEN 1 ELSE fence_attempts + 1 END,
           fence_tried_at = now(),
           fence_retry_at = now() + make_interval(secs => CAST(:lease AS float8))
     WHERE id = :id AND fenced_at IS NULL AND status = '{HostStatus.OFFLINE.value}'
       AND (fence_tried_at IS NULL OR fence_retry_at <= now())
    RETURNING fence_attempts
    """
)
# Only the try that failed (a new silence's first try, or a fence, leaves it alone).
_FENCE_FAILED = text(
    """
    UPDATE hosts SET fence_error = :error, fence_retry_at = now() + make_interval(secs => :retry_after)
     WHERE id = :id AND fenced_at IS NULL AND fence_tried_at IS NOT NULL AND fence_attempts = :attempt
    RETURNING fence_retry_at
    """
)


@dataclass(frozen=True, slots=True)
class Fenced:
    host: HostRecord
    newly: bool  # False: it was fenced already (nothing changed)


class NotFenced(Exception):
    """DELETE /v1/hosts/{id}/fence on a host that is not fenced."""


class FenceStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def fence(self, host_id: str, by: FencedBy) -> Fenced | None:
        """Declare ``host_id`` down; None if no such host. Fencing a fenced host changes nothing."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(_FENCE, {"id": host_id, "by": by.value})).first()
        return None if row is None else Fenced(host_from_row(row), bool(row.newly))

    @retry_on_dead_connection
    async def unfence(self, host_id: str, *, offline_after: float) -> HostRecord | None:
        """Put a fenced host back in service; None if no such host, :class:`NotFenced` if not fenced."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(_UNFENCE, {"id": host_id, "offline_after": offline_after})).first()
            if row is None:
                if await connection.scalar(_EXISTS, {"id": host_id}):
                    raise NotFenced(f"host {host_id} is not fenced")
                return None
        return host_from_row(row)

    async def claim_try(self, host_id: str, *, lease: float | None = None) -> int | None:
        """The attempt number (1 for a silence's first) if this caller is the one to act on the lost
        host now, else None. ``lease``: seconds after which, unless :meth:`record_failure` says
        otherwise, the host may be tried again (the try must have ended by then); None: not again in
        this silence."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(_CLAIM_TRY, {"id": host_id, "lease": lease})).first()
        return None if row is None else int(row.fence_attempts)

    async def record_failure(self, host_id: str, attempt: int, error: str, *, retry_after: float) -> datetime | None:
        """Try ``attempt`` failed with ``error``: the next is due ``retry_after`` seconds from now
        (PostgreSQL's clock), when; None if the try is over anyway (the host fenced or back)."""
        params = {"id": host_id, "attempt": attempt, "error": error, "retry_after": retry_after}
        async with self.engine.begin() as connection:
            row = (await connection.execute(_FENCE_FAILED, params)).first()
        return None if row is None else row.fence_retry_at
