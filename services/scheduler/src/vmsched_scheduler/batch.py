"""Placing many VMs per round trip: the scheduler's fast path.

A replica holds up to VMSCHED_SCHEDULER_PREFETCH ``vm.create`` messages at once. Instead of one refresh,
claim, commit and publish per message, the messages that arrive within a few milliseconds are placed
together (:class:`~vmsched_common.batching.Batcher`):

1. one incremental refresh of the in-memory snapshot;
2. one decision per VM, in memory, each booked on the local copy so the next sees it;
3. one pipelined Redis call with every claim (each still its own atomic Lua script);
4. one PostgreSQL transaction with every commit (the same guard, per host summed over the batch);
5. every ``vm.assigned`` published at once, the handlers returning (acking) only after its confirm.

The order of the contract holds per VM: claim, then commit, then publish, then ack. Whatever is not
the common case (a refused claim, a VM no longer pending, no host at all, round robin's shared
cursor, a host refused by the PostgreSQL guard) goes to the one-VM path, :meth:`Scheduler.place`,
which is idempotent on the VM: a claim taken here binds the VM there ("held").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from vmsched_common.batching import Batcher
from vmsched_common.logs import bound, get_logger
from vmsched_common.messages import VmAssigned, VmCreate
from vmsched_common.metrics import CLAIM_CONFLICTS, DECISION_SECONDS, PLACEMENTS, REQUEST_TO_ASSIGNMENT_SECONDS
from vmsched_common.settings import Strategy
from vmsched_scheduler.fleet_cache import demand_of
from vmsched_scheduler.placement import (
    Decision,
    DecisionContext,
    PlacementRequest,
    explain,
    scheduling_line,
    selected_line,
)
from vmsched_scheduler.service import (
    DETAILED_FLEET_LIMIT,
    Scheduler,
    assigned_event,
    host_details,
    placement_record,
)
from vmsched_scheduler.store import CommitOutcome, PendingCommit
from vmsched_scheduler.tracing import CLAIM_SPAN, COMMIT_SPAN, traced_decide, tracer

log = get_logger("vmsched_scheduler")

# How long the first message of a batch waits for company; bounds the latency batching adds.
BATCH_DELAY = 0.003


@dataclass(frozen=True, slots=True)
class Placed:
    host_id: str
    lines: tuple[str, str]  # the seed's two lines, logged by the message's own handler (its trace)


@dataclass(frozen=True, slots=True)
class OneByOne:
    """Not settled here: the one-VM path takes it, knowing how many of its claims were refused."""

    conflicts: int = 0


ONE_BY_ONE = OneByOne()


@dataclass(frozen=True, slots=True)
class _Item:
    message: VmCreate
    trace: otel_context.Context  # the handler's: each VM's spans stay in its own trace


@dataclass
class _Candidate:
    message: VmCreate
    trace: otel_context.Context
    strategy: Strategy
    decision: Decision
    record: dict[str, Any]
    host_id: str = ""


class BatchPlacer:
    """Places ``vm.create`` messages in batches; anything unusual falls back to ``scheduler.place``."""

    def __init__(self, scheduler: Scheduler, *, max_batch: int) -> None:
        self.scheduler = scheduler
        self._batcher: Batcher[_Item, Placed | OneByOne] = Batcher(
            self._place_batch, name="placements", max_size=max_batch, max_delay=BATCH_DELAY
        )

    async def place(self, message: VmCreate) -> None:
        """Handle one message (the consumer's handler): acked by the caller once this returns."""
        with bound(vm_id=str(message.vm_id), attempt=message.attempt):
            placed = await self._batcher.submit(_Item(message, otel_context.get_current()))
            if isinstance(placed, OneByOne):
                await self.scheduler.place(message, prior_conflicts=placed.conflicts)
                return
            log.info(placed.lines[0])
            log.info(placed.lines[1], host=placed.host_id)

    async def drain(self) -> None:
        await self._batcher.drain()

    async def _place_batch(self, items: list[_Item]) -> Sequence[Placed | OneByOne]:
        s = self.scheduler
        default = await s.store.default_strategy()
        await s.fleet.refresh()
        fleet = s.fleet.fleet
        context = DecisionContext(
            now=time.time(),
            offline_timeout=s.settings.agent_offline_timeout,
            weights=s.weights,
            rng=s.rng,
        )
        results: dict[int, Placed | OneByOne] = {}
        candidates: dict[int, _Candidate] = {}
        for index, item in enumerate(items):
            message = item.message
            strategy = message.strategy or default
            if strategy is Strategy.ROUND_ROBIN:  # needs the shared cursor, one Redis call per VM
                results[index] = ONE_BY_ONE
                continue
            request = PlacementRequest(
                vm_id=str(message.vm_id),
                name=message.name,
                demand=demand_of(message.resources),
                labels=dict(message.labels),
                strategy=strategy,
                exclude_hosts=frozenset(message.exclude_hosts),
            )
            started = time.perf_counter()
            with _within(item.trace):
                decision = traced_decide(fleet, request, context)
            seconds = time.perf_counter() - started
            DECISION_SECONDS.observe(seconds)
            if decision.host_id is None:  # unschedulable, or the snapshot is behind: the careful path
                results[index] = ONE_BY_ONE
                continue
            record = placement_record(strategy, decision, decision.host_id)
            record["hosts"] = (
                host_details(explain(fleet, request, context)) if len(fleet) <= DETAILED_FLEET_LIMIT else []
            )
            record["decision_us"] = round(seconds * 1e6, 1)
            record["claim_conflicts"] = 0
            # Booked now, so that the next VM of this batch is decided against what is left.
            fleet.allocate(decision.host_id, request.demand)
            candidates[index] = _Candidate(message, item.trace, strategy, decision, record)

        await self._claim(candidates, results)
        placed = await self._commit(candidates, results)
        publishing = []
        for trace_context, event in placed:
            with _within(trace_context):  # a task copies the context it is made in: the VM's trace
                publishing.append(asyncio.ensure_future(s.publish_assigned(event)))
        await asyncio.gather(*publishing)
        return [results[index] for index in range(len(items))]

    async def _claim(self, candidates: dict[int, _Candidate], results: dict[int, Placed | OneByOne]) -> None:
        s = self.scheduler
        indexes = list(candidates)
        with _spans(CLAIM_SPAN, [candidates[i] for i in indexes]) as spans:
            claims = await s.snapshot.claim_many(
                [
                    (candidates[i].message.vm_id, str(candidates[i].decision.host_id), candidates[i].message.resources)
                    for i in indexes
                ],
                time.time(),
            )
            for span, claim in zip(spans, claims, strict=True):
                span.set_attribute("vmsched.claim.outcome", claim.outcome)
        stale: set[str] = set()
        for index, claim in zip(indexes, claims, strict=True):
            candidate = candidates[index]
            chosen = str(candidate.decision.host_id)
            if claim.outcome == "claimed":
                candidate.host_id = chosen
                continue
            # Not booked here after all: undo the local booking; the host's truth is re-read below.
            s.fleet.fleet.release(chosen, demand_of(candidate.message.resources))
            stale.add(chosen)
            if claim.outcome == "held":  # an earlier delivery claimed a host: the VM is bound to it
                candidate.host_id = claim.detail
                candidate.record["host"] = claim.detail
                continue
            CLAIM_CONFLICTS.labels("redis").inc()
            del candidates[index]
            results[index] = OneByOne(conflicts=1)
        await s.fleet.reread_many(stale)

    async def _commit(
        self, candidates: dict[int, _Candidate], results: dict[int, Placed | OneByOne]
    ) -> list[tuple[otel_context.Context, VmAssigned]]:
        s = self.scheduler
        indexes = list(candidates)
        with _spans(COMMIT_SPAN, [candidates[i] for i in indexes]) as spans:
            outcomes = await s.store.commit_placements(
                [
                    PendingCommit(
                        vm_id=candidates[i].message.vm_id,
                        attempt=candidates[i].message.attempt,
                        host_id=candidates[i].host_id,
                        resources=candidates[i].message.resources,
                        strategy=candidates[i].strategy,
                        placement=candidates[i].record,
                    )
                    for i in indexes
                ]
            )
            for span, outcome in zip(spans, outcomes or [], strict=False):
                span.set_attribute("vmsched.commit.outcome", outcome.outcome.value)

        if outcomes is None:
            # A host refused in PostgreSQL (the snapshot was wrong about it): nothing was written;
            # one by one, each VM finds its claim held and commits alone, and the culprit moves on.
            CLAIM_CONFLICTS.labels("postgres").inc()
            for index in indexes:
                results[index] = ONE_BY_ONE
            return []
        events: list[tuple[otel_context.Context, VmAssigned]] = []
        for index, outcome in zip(indexes, outcomes, strict=True):
            candidate = candidates[index]
            if outcome.outcome is not CommitOutcome.PLACED:  # a redelivery, a stale attempt: the careful path
                results[index] = ONE_BY_ONE
                continue
            assert outcome.scheduled_at is not None
            assert outcome.created_at is not None
            PLACEMENTS.labels(candidate.strategy.value, "scheduled").inc()
            REQUEST_TO_ASSIGNMENT_SECONDS.observe((outcome.scheduled_at - outcome.created_at).total_seconds())
            event = assigned_event(candidate.message, candidate.host_id, candidate.strategy, outcome.scheduled_at)
            events.append((candidate.trace, event))
            name = candidate.message.name
            host = s.fleet.fleet.host(candidate.host_id)
            selected = (
                selected_line(name, host, None)
                if host is not None
                else f"Selected agent '{candidate.host_id}' for VM '{name}'"
            )
            results[index] = Placed(candidate.host_id, (scheduling_line(name, candidate.strategy), selected))
        return events


@contextlib.contextmanager
def _within(trace_context: otel_context.Context) -> Iterator[None]:
    token = otel_context.attach(trace_context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def _spans(name: str, candidates: Sequence[_Candidate]) -> Iterator[list[Span]]:
    """One span per VM, each in the VM's own trace, around one batched call. The call itself (and
    the spans the Redis or asyncpg instrumentation adds) runs under the first VM's span."""
    spans = [
        tracer.start_span(name, context=c.trace, attributes={"vmsched.host": c.host_id or str(c.decision.host_id)})
        for c in candidates
    ]
    try:
        if spans:
            with _within(trace.set_span_in_context(spans[0])):
                yield spans
        else:
            yield spans
    finally:
        for span in spans:
            span.end()
