"""The audit trail: every mutating /v1 request (POST, PUT, PATCH, DELETE), stored with who made it,
what it asked and how it ended, by one ASGI middleware, whatever the route and whatever the outcome
(refused ones included: a 401, 403, 413, 422 or 429 is recorded as well).

The record is written before the response leaves (rows of concurrent requests go in one
statement): a client that got an answer has its request on the trail. A handler may write its
request's row itself, in the transaction of the change it records (the VM intake does: one commit
for a group of requests and their rows), and says so with :func:`mark_audited`. A change whose record could
not be written (PostgreSQL went away between the two) is logged as an error instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from vmsched_api.identity.scopes import Principal
from vmsched_api.request_phases import Phase, timed
from vmsched_pg.engine import lone_statement, retry_on_dead_connection
from vmsched_pg.models import AuditRow
from vmsched_runtime.batching import Batcher
from vmsched_runtime.logs import get_logger

log = get_logger("vmsched_api")

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
AUDITED_PREFIX = "/v1/"
# POSTs that change nothing (a what-if takes its VMs as a body): not on the trail, which records
# changes; auditing them would also make a what-if write to PostgreSQL.
READ_ONLY_POSTS = frozenset({"/v1/placement/simulate"})
# The request state's key for the principal a request acted as (set by identity.auth).
PRINCIPAL = "principal"
# The request state's key saying its audit row is written already (see mark_audited).
AUDITED = "audited"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int | None
    at: datetime
    token_id: str | None
    project: str | None
    action: str  # "<method> <route template>", e.g. "DELETE /v1/vms/{vm_id}"
    target: str  # what it acted on: the path, or for a create the new thing's (its Location)
    status: int

    @classmethod
    def from_row(cls, row: Any) -> AuditEntry:
        return cls(
            id=row.id,
            at=row.at,
            token_id=row.token_id,
            project=row.project,
            action=row.action,
            target=row.target,
            status=row.status,
        )


@dataclass(frozen=True, slots=True)
class AuditStub:
    """Who made a request and what it asked, before it is known how it ends: what a handler that
    writes its request's audit row itself (in the transaction of the change) starts from."""

    token_id: str | None
    project: str | None
    action: str
    path: str

    @classmethod
    def of(cls, scope: Scope) -> AuditStub:
        principal: Principal | None = scope.get("state", {}).get(PRINCIPAL)
        return cls(
            token_id=principal.token_id if principal else None,
            project=principal.project if principal else None,
            action=action_of(scope),
            path=scope["path"],
        )

    def entry(self, status: int, target: str) -> AuditEntry:
        return AuditEntry(
            id=None,
            at=datetime.now(UTC),
            token_id=self.token_id,
            project=self.project,
            action=self.action,
            target=target,
            status=status,
        )


def action_of(scope: Scope) -> str:
    """``<method> <route template>``, e.g. ``DELETE /v1/vms/{vm_id}`` (the path when no route matched)."""
    # The /v1 router's routes know their path below /v1 only.
    below_v1 = getattr(scope.get("route"), "path", None)
    template = f"{AUDITED_PREFIX.rstrip('/')}{below_v1}" if below_v1 else scope["path"]
    return f"{scope['method']} {template}"


def mark_audited(scope: Scope) -> None:
    """The request's audit row is written (by its handler, with its change): the middleware skips it."""
    scope.setdefault("state", {})[AUDITED] = True


async def write_audit(connection: AsyncConnection, entries: Sequence[AuditEntry]) -> None:
    """Insert audit rows on ``connection`` (in the caller's transaction, or alone)."""
    if not entries:
        return
    rows = [
        {
            "at": entry.at,
            "token_id": entry.token_id,
            "project": entry.project,
            "action": entry.action[:128],
            "target": entry.target[:512],
            "status": entry.status,
        }
        for entry in entries
    ]
    await connection.execute(insert(AuditRow), rows)


class AuditLog:
    """The audit table: written in batches (one statement for the requests of a moment), read by page."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._writes = Batcher(self._insert, name="audit", max_size=256, max_delay=0.002)

    async def record(self, entry: AuditEntry) -> None:
        await self._writes.submit(entry)

    async def drain(self) -> None:
        await self._writes.drain()

    @retry_on_dead_connection
    async def _insert(self, entries: list[AuditEntry]) -> Sequence[None]:
        async with lone_statement(self.engine) as connection:
            await write_audit(connection, entries)
        return [None] * len(entries)

    @retry_on_dead_connection
    async def page(
        self, *, limit: int, before: int | None, project: str | None, token_id: str | None
    ) -> tuple[list[AuditEntry], int | None]:
        """Newest first: up to ``limit`` entries older than the entry ``before``; and the cursor of
        the next page (None on the last)."""
        clauses: list[str] = []
        params: dict[str, object] = {"limit": limit + 1}
        for column, value in (("project", project), ("token_id", token_id)):
            if value is not None:
                clauses.append(f"{column} = :{column}")
                params[column] = value
        if before is not None:
            clauses.append("id < :before")
            params["before"] = before
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        query = text(
            f"SELECT id, at, token_id, project, action, target, status FROM audit {where} ORDER BY id DESC LIMIT :limit"
        )
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query, params)).all()
        entries = [AuditEntry.from_row(row) for row in rows[:limit]]
        return entries, (entries[-1].id if len(rows) > limit else None)


class AuditMiddleware:
    """Records every mutating /v1 request as its response starts (pure ASGI: the body streams on)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in MUTATING
            or not scope["path"].startswith(AUDITED_PREFIX)
            or scope["path"] in READ_ONLY_POSTS
        ):
            await self.app(scope, receive, send)
            return

        async def audited(message: Message) -> None:
            if message["type"] == "http.response.start" and not scope.get("state", {}).get(AUDITED):
                await _record(scope, message)
            await send(message)

        await self.app(scope, receive, audited)


async def _record(scope: Scope, start: Message) -> None:
    location = next((value.decode() for name, value in start.get("headers", []) if name == b"location"), None)
    entry = AuditStub.of(scope).entry(int(start["status"]), location or scope["path"])
    try:
        trail: AuditLog = scope["app"].state.services.audit
        with timed(Phase.AUDIT):
            await trail.record(entry)
    except Exception as error:
        log.error(
            "audit record not written",
            action=entry.action,
            target=entry.target,
            status=entry.status,
            token_id=entry.token_id,
            error=type(error).__name__,
        )
