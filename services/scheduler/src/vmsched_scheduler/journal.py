"""This replica's decision journal: the inputs of each decision noted as it is made, written to
PostgreSQL before the decisions are claimed (so a record that names an entry finds it)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence

from vmsched_contract.decision import JournalKind, JournalRef
from vmsched_placement import DecisionContext, Fleet, PlacementRequest, Weights
from vmsched_placement.journal import Entry, Journal, PreemptionInputs

Append = Callable[[str, Sequence[tuple[int, bool, bytes]]], Awaitable[None]]


class DecisionJournal:
    def __init__(
        self,
        append: Append,
        weights: Weights,
        offline_timeout: float,
        *,
        replica: str | None = None,
        retention: float | None = None,
    ) -> None:
        """``retention``: VMSCHED_JOURNAL_RETENTION; a checkpoint then comes at least every half of it,
        so that pruning may drop a chain older than the retention whole (vmsched_pg.journal)."""
        self.replica = replica or uuid.uuid4().hex[:16]  # a new chain per process: its settings may differ
        self._append = append
        self._journal = Journal(weights, offline_timeout, checkpoint_age=None if retention is None else retention / 2)
        self._pending: dict[int, Entry] = {}

    def note(
        self,
        fleet: Fleet,
        request: PlacementRequest,
        context: DecisionContext,
        seed: int | None,
        preemption: PreemptionInputs | None = None,
    ) -> JournalRef:
        """Note one decision (``preemption``: a preemption's choice, with what it read beside the fleet)."""
        entry = self._journal.note(fleet, request, context, seed, preemption)
        self._pending[entry.seq] = entry
        kind = JournalKind.PLACEMENT if preemption is None else JournalKind.PREEMPTION
        return JournalRef(replica=self.replica, seq=entry.seq, kind=kind)

    async def flush(self, refs: Sequence[JournalRef]) -> None:
        """Write the entries of ``refs`` (one round's: rounds run side by side); on failure the chain
        starts again at a checkpoint (entries after the lost ones are deltas of nothing stored: their
        replays answer that the journal is incomplete) and the error goes to the caller's round."""
        entries = [entry for ref in refs if (entry := self._pending.pop(ref.seq, None)) is not None]
        try:
            await self._append(self.replica, [(e.seq, e.checkpoint, e.body) for e in entries])
        except BaseException:
            self._journal.restart()
            raise
