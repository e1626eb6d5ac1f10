"""The ``decision_journal`` table: a scheduler replica appends its decisions' inputs
(:mod:`vmsched_placement.journal`), the API reads one decision's chain back to replay it.

Kept in PostgreSQL, not Redis: a replay must answer for any decision the ``vms`` table records, and
a Redis flush (which the snapshot survives by reconciliation) would lose the inputs for good.
"""

from __future__ import annotations

from collections.abc import Sequence

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


async def append(engine: AsyncEngine, replica: str, entries: Sequence[tuple[int, bool, bytes]]) -> None:
    """Write ``(seq, checkpoint, body)`` entries of ``replica`` in one transaction."""
    if not entries:
        return
    rows = [
        {"replica": replica, "seq": seq, "checkpoint": checkpoint, "body": body} for seq, checkpoint, body in entries
    ]
    async with engine.begin() as connection:
        await connection.execute(_APPEND, rows)


class IncompleteChain(LookupError):
    """Some entry between the decision and its checkpoint is missing (its write failed)."""


async def chain(connection: AsyncConnection, replica: str, seq: int) -> list[bytes]:
    """The bodies a replay of decision ``seq`` of ``replica`` reads, its checkpoint first; raises
    :class:`IncompleteChain` when the chain has a hole or the decision is missing."""
    rows = (await connection.execute(_CHAIN, {"replica": replica, "seq": seq})).all()
    if not rows or rows[-1].seq != seq or rows[-1].seq - rows[0].seq != len(rows) - 1:
        raise IncompleteChain(f"decision {seq} of replica {replica}: journal incomplete")
    return [bytes(row.body) for row in rows]
