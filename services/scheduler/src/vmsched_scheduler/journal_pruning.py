"""Pruning the decision journal: entries older than ``VMSCHED_JOURNAL_RETENTION`` go, except those a
decision still inside the retention reads (vmsched_pg.journal.prune).

One replica per ``VMSCHED_JOURNAL_PRUNE_INTERVAL`` prunes: a Redis lock that lasts the interval, as
the reconcile takes. Two prunings at once would still be correct (each deletes only what no kept
decision reads); the lock saves the work.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_pg import journal
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.one_replica import every_interval_on_one_replica

log = get_logger(__name__)


async def prune_once(engine: AsyncEngine, retention: float) -> int:
    """Prune the entries older than ``retention`` seconds that no kept decision reads; how many went."""
    cutoff = datetime.now(UTC) - timedelta(seconds=retention)
    deleted = await journal.prune(engine, cutoff)
    # Said every time (once per interval, by one replica): that pruning runs at all is worth seeing.
    log.info("decision journal pruned", entries=deleted, cutoff=cutoff.isoformat())
    return deleted


async def prune_forever(engine: AsyncEngine, snapshot: Snapshot, retention: float, interval: float) -> None:
    """Prune every ``interval`` seconds, one replica at a time (a Redis lock held for the interval)."""
    await every_interval_on_one_replica(
        snapshot,
        "journal-prune-lock",
        interval,
        lambda: prune_once(engine, retention),
        "decision journal pruning failed",
    )
