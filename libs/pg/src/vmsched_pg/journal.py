"""The ``decision_journal`` table: a scheduler replica appends its decisions' inputs
(:mod:`vmsched_placement.journal`), the API reads one decision's chain back to replay it.

Kept in PostgreSQL, not Redis: a replay must answer for any decision the ``vms`` table records, and
a Redis flush (which the snapshot survives by reconciliation) would lose the inputs for good.

Pruned by age (:func:`prune`, ``VMSCHED_JOURNAL_RETENTION``), a checkpoint at a time: a replica's
entries before its latest checkpoint written before the cutoff were all noted before that checkpoint,
so before the cutoff, and no later entry reads them. A chain whose last entry was written before the
cutoff goes whole (its replica, if alive, starts its next entry with a checkpoint: it writes one at
least every half retention).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

_APPEND = text(
    "INSERT INTO decision_journal (replica, seq, checkpoint, body) VALUES (:replica, :seq, :checkpoint, :body)"
)
# From the decision's checkpoint (the last at or before it) to the decision itself, in order.
_CHAIN = text(
    "SELECT seq, body FROM decision_journal WHERE replica = :replica AND seq <= :seq AND seq >= ("
    "SELECT max(seq) FROM decision_journal WHERE replica = :replica AND checkpoint AND seq <= :seq) ORDER BY seq"
)


# Per replica: its latest checkpoint written before the cutoff (the partial index holds only
# checkpoints: a few rows per replica).
_EXPIRED_CHECKPOINTS = text(
    "SELECT replica, max(seq) FILTER (WHERE created_at < :cutoff) AS expired FROM decision_journal "
    "WHERE checkpoint GROUP BY replica"
)
_LAST = text(
    "SELECT seq, created_at < :cutoff AS expired FROM decision_journal WHERE replica = :replica "
    "ORDER BY seq DESC LIMIT 1"
)
_DELETE_BELOW = text("DELETE FROM decision_journal WHERE replica = :replica AND seq < :below")
_ENTRY = text("SELECT 1 FROM decision_journal WHERE replica = :replica AND seq = :seq")


async def append(engine: AsyncEngine, replica: str, entries: Sequence[tuple[int, bool, bytes]]) -> None:
    """Write ``(seq, checkpoint, body)`` entries of ``replica`` in one transaction."""
    if not entries:
        return
    rows = [
        {"replica": replica, "seq": seq, "checkpoint": checkpoint, "body": body} for seq, checkpoint, body in entries
    ]
    async with engine.begin() as connection:
        await connection.execute(_APPEND, rows)


async def prune(engine: AsyncEngine, cutoff: datetime) -> int:
    """Delete the entries no decision written at or after ``cutoff`` reads (see the module's
    docstring); returns how many went."""
    deleted = 0
    async with engine.connect() as connection:
        replicas = (await connection.execute(_EXPIRED_CHECKPOINTS, {"cutoff": cutoff})).all()
    for replica, expired in replicas:
        # One transaction per replica: the first pruning of a long journal deletes much.
        async with engine.begin() as connection:
            last = (await connection.execute(_LAST, {"replica": replica, "cutoff": cutoff})).first()
            if last is None:
                continue  # pruned meanwhile
            # Entries noted after ``last`` was read are not deleted: they may be deltas of it.
            below = last.seq + 1 if last.expired else expired
            if below is not None:
                result = await connection.execute(_DELETE_BELOW, {"replica": replica, "below": below})
                deleted += result.rowcount
    return deleted


class IncompleteChain(LookupError):
    """Some entry between the decision and its checkpoint is missing (its write failed)."""


class PrunedEntry(LookupError):
    """The decision's entry is gone: pruned, past the journal's retention."""


async def chain(connection: AsyncConnection, replica: str, seq: int) -> list[bytes]:
    """The bodies a replay of decision ``seq`` of ``replica`` reads, its checkpoint first; raises
    :class:`PrunedEntry` when the decision's entry is gone (entries are written before the records
    that name them, so only pruning removes one), :class:`IncompleteChain` when the chain has a hole."""
    rows = (await connection.execute(_CHAIN, {"replica": replica, "seq": seq})).all()
    if not rows or rows[-1].seq != seq or rows[-1].seq - rows[0].seq != len(rows) - 1:
        if (await connection.execute(_ENTRY, {"replica": replica, "seq": seq})).first() is None:
            raise PrunedEntry(f"decision {seq} of replica {replica}: its journal entry was pruned")
        raise IncompleteChain(f"decision {seq} of replica {replica}: journal incomplete")
    return [bytes(row.body) for row in rows]
