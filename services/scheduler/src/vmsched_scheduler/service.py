"""Placing one VM: decide, claim, commit, announce. Plain async code around the pure engine.

The order is the contract of design.md: the Redis claim (atomic, keyed by VM id) comes before the
PostgreSQL commit (conditional on ``pending``, guarded against overcommit), which comes before
``vm.assigned``; the message is acked only after all three. Every step is idempotent, so a
redelivered ``vm.create`` finishes the work of a crashed attempt instead of repeating it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vmsched_common.amqp import TransientError
from vmsched_common.logs import bound, get_logger
from vmsched_common.messages import (
    ALLOCATING_STATUSES,
    UnschedulableReason,
    VmAssigned,
    VmCreate,
    VmStatus,
    VmUnschedulable,
)
from vmsched_common.metrics import (
    CLAIM_CONFLICTS,
    DECISION_SECONDS,
    PLACEMENTS,
    REQUEST_TO_ASSIGNMENT_SECONDS,
)
from vmsched_common.settings import Settings, Strategy
from vmsched_common.snapshot import Snapshot
from vmsched_scheduler.fleet_cache import FleetCache, demand_of
from vmsched_scheduler.placement import (
    Decision,
    DecisionContext,
    HostVerdict,
    PlacementRequest,
    Weights,
    decision_log_lines,
    explain,
)
from vmsched_scheduler.store import CommitOutcome, SchedulerStore, VmRecord
from vmsched_scheduler.tracing import CLAIM_SPAN, COMMIT_SPAN, traced_decide, tracer

log = get_logger("vmsched_scheduler")

# Rounds of (decide, then try its ranked hosts) before a VM whose claims keep losing is given up on.
MAX_ROUNDS = 4
# Hosts detailed in a stored decision record; the rest are summarised by reason.
RECORDED_HOSTS = 50
# Per-host detail of a successful placement costs a pass over every host (about 2 us each); above
# this fleet size a placed VM's record keeps the summary and the ranked candidates only.
DETAILED_FLEET_LIMIT = 500

PublishAssigned = Callable[[VmAssigned], Awaitable[None]]
PublishUnschedulable = Callable[[VmUnschedulable], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class PlacementCost:
    """Kept in the decision record, for operators and the benchmark: how long the decision that
    placed the VM took, and how many claims were refused before one held."""

    decision_seconds: float
    claim_conflicts: int


@dataclass
class Scheduler:
    settings: Settings
    snapshot: Snapshot
    fleet: FleetCache
    store: SchedulerStore
    publish_assigned: PublishAssigned
    publish_unschedulable: PublishUnschedulable
    rng: random.Random = field(default_factory=random.Random)

    @property
    def weights(self) -> Weights:
        s = self.settings
        return Weights(cpu=s.weight_cpu, memory=s.weight_memory, disk=s.weight_disk)

    async def place(self, message: VmCreate, *, prior_conflicts: int = 0) -> None:
        """Place the VM of ``message`` (or finish what an earlier delivery started).
        ``prior_conflicts``: claims already refused for it (by the batched path), for its record."""
        with bound(vm_id=str(message.vm_id), attempt=message.attempt):
            await self._place(message, prior_conflicts)

    async def _place(self, message: VmCreate, prior_conflicts: int) -> None:
        strategy = message.strategy or await self.store.default_strategy()
        log.info(f"Scheduling VM '{message.name}' using {strategy.value} strategy", strategy=strategy.value)
        excluded = set(message.exclude_hosts)
        decision: Decision | None = None
        conflicts = prior_conflicts
        for _ in range(MAX_ROUNDS):
            await self.fleet.refresh()
            request = PlacementRequest(
                vm_id=str(message.vm_id),
                name=message.name,
                demand=demand_of(message.resources),
                labels=dict(message.labels),
                strategy=strategy,
                exclude_hosts=frozenset(excluded),
            )
            context = await self._context(strategy)
            started = time.perf_counter()
            decision = traced_decide(self.fleet.fleet, request, context)
            decision_seconds = time.perf_counter() - started
            DECISION_SECONDS.observe(decision_seconds)
            if decision.host_id is None:
                await self._refuse_while_snapshot_behind(decision)
                await self._unschedulable(message, strategy, request, context, decision)
                return
            for host_id in decision.ranked:
                timing = PlacementCost(decision_seconds, conflicts)
                if await self._try_host(message, strategy, host_id, decision, request, context, timing):
                    return
                conflicts += 1
                excluded.add(host_id)
        # Every candidate refused the claim, round after round: the snapshot keeps lying. Give the
        # message back; it is redelivered (bounded by the queue's delivery limit).
        raise RuntimeError(f"no claim succeeded after {MAX_ROUNDS} rounds; last decision {decision}")

    async def _refuse_while_snapshot_behind(self, decision: Decision) -> None:
        """After a Redis flush the snapshot lacks hosts until their next heartbeat. A VM must wait for
        them, not be declared unschedulable: if PostgreSQL knows more online hosts than the snapshot
        offers, this decision is premature and the message is retried."""
        if decision.eligible or decision.considered >= await self.store.online_hosts():
            return
        await self.fleet.refresh(force_full=True)
        raise TransientError(
            f"snapshot knows {decision.considered} hosts, PostgreSQL more online ones: waiting for heartbeats"
        )

    async def _context(self, strategy: Strategy) -> DecisionContext:
        cursor = await self.snapshot.next_round_robin() if strategy is Strategy.ROUND_ROBIN else 0
        return DecisionContext(
            now=time.time(),
            offline_timeout=self.settings.agent_offline_timeout,
            weights=self.weights,
            rng=self.rng,
            round_robin_cursor=cursor,
        )

    async def _try_host(
        self,
        message: VmCreate,
        strategy: Strategy,
        host_id: str,
        decision: Decision,
        request: PlacementRequest,
        context: DecisionContext,
        cost: PlacementCost,
    ) -> bool:
        """True when the VM is settled (placed here, or found already handled); False: next host."""
        # Explained before the claim changes this process's view of the chosen host.
        details = (
            host_details(explain(self.fleet.fleet, request, context))
            if len(self.fleet.fleet) <= DETAILED_FLEET_LIMIT
            else []
        )
        with tracer.start_as_current_span(CLAIM_SPAN, attributes={"vmsched.host": host_id}) as span:
            claim = await self.snapshot.claim(message.vm_id, host_id, message.resources, time.time())
            span.set_attribute("vmsched.claim.outcome", claim.outcome)
        if not claim.holds:
            CLAIM_CONFLICTS.labels("redis").inc()
            log.info(
                "claim refused, trying the next host",
                host=host_id,
                outcome=claim.outcome,
                detail=claim.detail,
            )
            await self.fleet.reread(host_id)
            return False
        claimed_now = claim.outcome == "claimed"
        # A claim held from an earlier delivery of this message binds the VM to that host.
        host_id = claim.detail
        if claimed_now:
            self.fleet.fleet.allocate(host_id, demand_of(message.resources))
        record = placement_record(strategy, decision, host_id)
        record["hosts"] = details
        record["decision_us"] = round(cost.decision_seconds * 1e6, 1)
        record["claim_conflicts"] = cost.claim_conflicts
        with tracer.start_as_current_span(COMMIT_SPAN, attributes={"vmsched.host": host_id}) as span:
            result = await self.store.commit_placement(
                message.vm_id, message.attempt, host_id, message.resources, strategy, record
            )
            span.set_attribute("vmsched.commit.outcome", result.outcome.value)
        if result.outcome is CommitOutcome.PLACED:
            assert result.scheduled_at is not None
            assert result.created_at is not None
            PLACEMENTS.labels(strategy.value, "scheduled").inc()
            REQUEST_TO_ASSIGNMENT_SECONDS.observe((result.scheduled_at - result.created_at).total_seconds())
            self._log_selected(message, host_id)
            await self.publish_assigned(assigned_event(message, host_id, strategy, result.scheduled_at))
            return True
        if result.outcome is CommitOutcome.HOST_REFUSED:
            CLAIM_CONFLICTS.labels("postgres").inc()
            log.warning("host refused in PostgreSQL; snapshot was stale", host=host_id)
            await self.snapshot.release(message.vm_id)
            await self.fleet.reread(host_id)
            return False
        await self._already_handled(message, host_id, claimed_now)
        return True

    async def _already_handled(self, message: VmCreate, claimed_host: str, claimed_now: bool) -> None:
        """The VM is not pending: a redelivery after a crash, a stale attempt, or a deleted VM."""
        vm = await self.store.load_vm(message.vm_id)
        holds_here = vm is not None and vm.hypervisor_id == claimed_host and vm.status in ALLOCATING_STATUSES
        if claimed_now and not holds_here:
            await self.snapshot.release(message.vm_id)
        if vm is None or vm.attempt != message.attempt:
            log.info("stale vm.create ignored", current_attempt=None if vm is None else vm.attempt)
            return
        await self.republish(message, vm)

    async def republish(self, message: VmCreate, vm: VmRecord) -> None:
        """Announce again what was decided; same message_id, so subscribers see one event."""
        PLACEMENTS.labels(vm.strategy or "unknown", "duplicate").inc()
        strategy = Strategy(vm.strategy) if vm.strategy else Strategy.LEAST_LOADED
        if vm.status in ALLOCATING_STATUSES and vm.hypervisor_id and vm.scheduled_at:
            await self.publish_assigned(assigned_event(message, vm.hypervisor_id, strategy, vm.scheduled_at))
        elif vm.status == VmStatus.UNSCHEDULABLE and vm.placement:
            await self.publish_unschedulable(unschedulable_event(message, vm.placement))

    async def _unschedulable(
        self,
        message: VmCreate,
        strategy: Strategy,
        request: PlacementRequest,
        context: DecisionContext,
        decision: Decision,
    ) -> None:
        verdicts = explain(self.fleet.fleet, request, context)
        record = placement_record(strategy, decision, None)
        record["hosts"] = host_details(verdicts)
        reason = decision.reason or UnschedulableReason.INSUFFICIENT_RESOURCES.value
        detail = unschedulable_detail(reason, decision)
        record["detail"] = detail
        PLACEMENTS.labels(strategy.value, "unschedulable").inc()
        log.warning(f"No host for VM '{message.name}': {detail}", reason=reason, rejections=dict(decision.rejections))
        if await self.store.mark_unschedulable(message.vm_id, message.attempt, f"{reason}: {detail}", strategy, record):
            await self.publish_unschedulable(unschedulable_event(message, record))
            return
        vm = await self.store.load_vm(message.vm_id)
        if vm is not None and vm.attempt == message.attempt:
            await self.republish(message, vm)

    def _log_selected(self, message: VmCreate, host_id: str) -> None:
        host = self.fleet.fleet.host(host_id)
        if host is None:
            log.info(f"Selected agent '{host_id}' for VM '{message.name}'", host=host_id)
            return
        lines = decision_log_lines(message.name, host, None)
        log.info(lines[-1], host=host_id)


def placement_record(strategy: Strategy, decision: Decision, host_id: str | None) -> dict[str, Any]:
    return {
        "strategy": strategy.value,
        "host": host_id,
        "score": decision.score if host_id == decision.host_id else None,
        "ranked": list(decision.ranked),
        "considered": decision.considered,
        "eligible": decision.eligible,
        "rejections": dict(decision.rejections),
        "reason": decision.reason,
        "decided_at": datetime.now(UTC).isoformat(),
    }


def host_details(verdicts: list[HostVerdict]) -> list[dict[str, Any]]:
    """Passing hosts first (best score first), then rejected ones, at most RECORDED_HOSTS."""
    ordered = sorted(verdicts, key=lambda v: (not v.passed, v.score if v.score is not None else 0.0, v.host_id))
    return [
        {"host": v.host_id, "passed": v.passed, "filter": v.filter, "reason": v.reason, "score": v.score}
        for v in ordered[:RECORDED_HOSTS]
    ]


def unschedulable_detail(reason: str, decision: Decision) -> str:
    if reason == UnschedulableReason.NO_AVAILABLE_AGENTS.value:
        return f"no online host among {decision.considered} known"
    summary = ", ".join(f"{name}: {count}" for name, count in sorted(decision.rejections.items()))
    return f"none of {decision.considered} hosts fits ({summary})"


def assigned_event(message: VmCreate, host_id: str, strategy: Strategy, scheduled_at: datetime) -> VmAssigned:
    return VmAssigned(
        vm_id=message.vm_id,
        name=message.name,
        hypervisor_id=host_id,
        resources=message.resources,
        strategy=strategy,
        attempt=message.attempt,
        scheduled_at=scheduled_at,
    )


def unschedulable_event(message: VmCreate, record: dict[str, Any]) -> VmUnschedulable:
    return VmUnschedulable(
        vm_id=message.vm_id,
        reason=UnschedulableReason(record.get("reason") or UnschedulableReason.INSUFFICIENT_RESOURCES),
        detail=str(record.get("detail", "")),
        rejections=dict(record.get("rejections", {})),
    )
