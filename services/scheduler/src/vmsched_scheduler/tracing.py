"""The scheduler's own spans, inside the consume span of ``vm.create``: the decision (what was
weighed and chosen), the Redis claim and the PostgreSQL commit. The Redis and asyncpg
instrumentations add a span per command and statement beneath the last two."""

from __future__ import annotations

from opentelemetry import trace

from vmsched_scheduler.placement import Decision, DecisionContext, Fleet, PlacementRequest, decide

tracer = trace.get_tracer("vmsched_scheduler")

DECISION_SPAN = "vmsched.decide"
CLAIM_SPAN = "vmsched.claim"
COMMIT_SPAN = "vmsched.commit"


def traced_decide(fleet: Fleet, request: PlacementRequest, context: DecisionContext) -> Decision:
    """:func:`decide`, in a span carrying the strategy, the hosts considered, rejected and chosen."""
    with tracer.start_as_current_span(DECISION_SPAN) as span:
        decision = decide(fleet, request, context)
        if span.is_recording():
            span.set_attributes(
                {
                    "vmsched.vm_id": request.vm_id,
                    "vmsched.strategy": decision.strategy.value,
                    "vmsched.hosts.considered": decision.considered,
                    "vmsched.hosts.eligible": decision.eligible,
                    "vmsched.hosts.rejected": decision.considered - decision.eligible,
                    "vmsched.host": decision.host_id or "",
                    "vmsched.candidates": list(decision.ranked),
                    "vmsched.unschedulable_reason": decision.reason or "",
                    **{f"vmsched.rejected.{name}": count for name, count in decision.rejections.items()},
                }
            )
    return decision
