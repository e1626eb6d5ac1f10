"""API tokens in PostgreSQL: created (the secret returned once, its hash kept), listed, revoked, and
looked up by the hash of a presented secret."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_api.identity.scopes import Principal
from vmsched_api.identity.token_secrets import new_secret, secret_hash
from vmsched_contract.scopes import Scope
from vmsched_pg.engine import retry_on_dead_connection

# Revocations are announced here (payload: the token id), in the revoking transaction: PostgreSQL
# delivers it to every listening API replica when that transaction commits.
REVOCATIONS_CHANNEL = "vmsched_token_revoked"

_FIELDS = "id, name, project, scopes, created_at, expires_at, revoked_at"
_CREATE = text(
    f"""
    INSERT INTO tokens (id, name, project, scopes, secret_hash, expires_at)
    SELECT :id, :name, p.name, :scopes, :secret_hash, :expires_at FROM projects p WHERE p.name = :project
    RETURNING {_FIELDS}
    """
)
_LIVE = "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())"
_BY_HASH = text(f"SELECT {_FIELDS} FROM tokens WHERE secret_hash = :secret_hash AND {_LIVE}")
_REVOKE = text(
    f"""
    WITH revoked AS (
        UPDATE tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = :id RETURNING id
    )
    SELECT id, pg_notify('{REVOCATIONS_CHANNEL}', CAST(id AS text)) FROM revoked
    """
)


class UnknownProject(Exception):
    """A token (or a VM) names a project that does not exist."""


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: UUID
    name: str
    project: str
    scopes: tuple[Scope, ...]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def from_row(cls, row: Any) -> TokenRecord:
        return cls(
            id=row.id,
            name=row.name,
            project=row.project,
            scopes=tuple(Scope(scope) for scope in row.scopes),
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
        )

    def principal(self) -> Principal:
        return Principal(token_id=str(self.id), name=self.name, project=self.project, scopes=frozenset(self.scopes))


class TokenStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def create(
        self,
        *,
        name: str,
        project: str,
        scopes: Iterable[Scope],
        expires_at: datetime | None,
        secret: str | None = None,
    ) -> tuple[TokenRecord, str]:
        """A new token and its secret (which nothing keeps: show it once). Raises UnknownProject.
        ``secret``: one made elsewhere (the same token in every cell behind a router), else a new one."""
        secret = secret or new_secret()
        params = {
            "id": uuid.uuid4(),
            "name": name,
            "project": project,
            "scopes": sorted(scope.value for scope in set(scopes)),
            "secret_hash": secret_hash(secret),
            "expires_at": expires_at,
        }
        async with self.engine.begin() as connection:
            row = (await connection.execute(_CREATE, params)).first()
        if row is None:
            raise UnknownProject(project)
        return TokenRecord.from_row(row), secret

    @retry_on_dead_connection
    async def list(self, project: str | None = None) -> list[TokenRecord]:
        where = "WHERE project = :project" if project is not None else ""
        async with self.engine.connect() as connection:
            rows = await connection.execute(
                text(f"SELECT {_FIELDS} FROM tokens {where} ORDER BY created_at, id"), {"project": project}
            )
            return [TokenRecord.from_row(row) for row in rows]

    @retry_on_dead_connection
    async def get(self, token_id: UUID) -> TokenRecord | None:
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(text(f"SELECT {_FIELDS} FROM tokens WHERE id = :id"), {"id": token_id})
            ).first()
        return TokenRecord.from_row(row) if row else None

    @retry_on_dead_connection
    async def revoke(self, token_id: UUID) -> bool:
        """Revoke a token from now on (again: no change); False if there is no such token."""
        async with self.engine.begin() as connection:
            return (await connection.execute(_REVOKE, {"id": token_id})).first() is not None

    @retry_on_dead_connection
    async def live_token(self, hashed: str) -> TokenRecord | None:
        """The token whose secret has this hash (token_secrets.secret_hash), if it is neither revoked
        nor expired."""
        async with self.engine.connect() as connection:
            row = (await connection.execute(_BY_HASH, {"secret_hash": hashed})).first()
        return TokenRecord.from_row(row) if row else None
