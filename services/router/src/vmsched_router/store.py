"""Where each VM (and server group) lives: the router's own small table, in a database of its own
(``VMSCHED_ROUTER_DATABASE_URL``; never a cell's). Created if missing at start: one table, no
migrations (a new column would be added here with ``ADD COLUMN IF NOT EXISTS``).

Keys are ``vm:<id>``, ``group:<id>`` and ``idempotency:<hash>`` (a create's Idempotency-Key, hashed
with the caller's token, so a repeated request goes back to the cell that holds the key). A row is
written once and never changes: a placed VM never moves between cells. Rows of deleted VMs stay
(a later GET answers the cell's 404 or ``deleted``); they are a few dozen bytes each.
"""

from __future__ import annotations

from collections import OrderedDict

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_pg.engine import create_engine, ensure_database, retry_on_dead_connection

_CREATE = text(
    """
    CREATE TABLE IF NOT EXISTS router_routes (
        key text PRIMARY KEY,
        cell text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )
    """
)
_RECORD = text(
    "INSERT INTO router_routes (key, cell) SELECT unnest(CAST(:keys AS text[])), :cell ON CONFLICT (key) DO NOTHING"
)
_LOOKUP = text("SELECT cell FROM router_routes WHERE key = :key")

# Routes kept in memory per process: a GET after a POST (the common case) reads no row.
CACHED_ROUTES = 100_000


class RouteStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._cache: OrderedDict[str, str] = OrderedDict()

    @classmethod
    async def open(cls, database_url: str) -> RouteStore:
        """The store at ``database_url``: the database and its table made if missing."""
        await ensure_database(database_url)
        engine = create_engine(database_url, pool_size=5)
        async with engine.begin() as connection:
            await connection.execute(_CREATE)
        return cls(engine)

    def _remember(self, key: str, cell: str) -> None:
        self._cache[key] = cell
        self._cache.move_to_end(key)
        while len(self._cache) > CACHED_ROUTES:
            self._cache.popitem(last=False)

    @retry_on_dead_connection
    async def record(self, keys: list[str], cell: str) -> None:
        """``keys`` live in ``cell`` (a key already recorded keeps its cell)."""
        if not keys:
            return
        async with self.engine.begin() as connection:
            await connection.execute(_RECORD, {"keys": keys, "cell": cell})
        for key in keys:
            self._remember(key, cell)

    @retry_on_dead_connection
    async def cell_of(self, key: str) -> str | None:
        if key in self._cache:
            return self._cache[key]
        async with self.engine.connect() as connection:
            cell = (await connection.execute(_LOOKUP, {"key": key})).scalar_one_or_none()
        if cell is not None:
            self._remember(key, cell)
        return None if cell is None else str(cell)

    async def ping(self) -> bool:
        async with self.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        return True

    async def close(self) -> None:
        await self.engine.dispose()
