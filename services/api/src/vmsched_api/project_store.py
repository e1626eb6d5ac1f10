"""Projects in PostgreSQL: their quotas, and what their VMs use of them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_api.quota import USAGE
from vmsched_pg.engine import retry_on_dead_connection

QUOTA_FIELDS = ("instances", "cpu", "memory_mb", "disk_gb", "gpu", "max_priority")
_COLUMNS = "name, created_at, " + ", ".join(f"quota_{field}" for field in QUOTA_FIELDS)


class ProjectExists(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ProjectRecord:
    name: str
    quota: dict[str, int | None]  # per QUOTA_FIELDS; None: no limit
    created_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> ProjectRecord:
        return cls(
            name=row.name,
            quota={field: getattr(row, f"quota_{field}") for field in QUOTA_FIELDS},
            created_at=row.created_at,
        )


class ProjectStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def create(self, name: str, quota: dict[str, int | None]) -> ProjectRecord:
        """Raises ProjectExists."""
        columns = ", ".join(f"quota_{field}" for field in QUOTA_FIELDS)
        values = ", ".join(f":{field}" for field in QUOTA_FIELDS)
        statement = text(f"INSERT INTO projects (name, {columns}) VALUES (:name, {values}) RETURNING {_COLUMNS}")
        try:
            async with self.engine.begin() as connection:
                row = (await connection.execute(statement, {"name": name, **quota})).one()
        except IntegrityError:
            raise ProjectExists(name) from None
        return ProjectRecord.from_row(row)

    @retry_on_dead_connection
    async def get(self, name: str) -> ProjectRecord | None:
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(text(f"SELECT {_COLUMNS} FROM projects WHERE name = :name"), {"name": name})
            ).first()
        return ProjectRecord.from_row(row) if row else None

    @retry_on_dead_connection
    async def list(self) -> list[ProjectRecord]:
        async with self.engine.connect() as connection:
            rows = await connection.execute(text(f"SELECT {_COLUMNS} FROM projects ORDER BY name"))
            return [ProjectRecord.from_row(row) for row in rows]

    @retry_on_dead_connection
    async def usage(self, name: str) -> dict[str, int]:
        """What the project's VMs use now (those in a status that counts against its quota)."""
        async with self.engine.connect() as connection:
            row = (await connection.execute(USAGE, {"project": name})).one()
        return {
            "instances": row.instances,
            "cpu": row.cpu,
            "memory_mb": row.memory_mb,
            "disk_gb": row.disk_gb,
            "gpu": row.gpu,
        }
