"""The scheduler's own spans, inside the consume span of each ``vm.create``: the decision of each VM
(what was weighed and chosen), the Redis claim and the PostgreSQL commit. The Redis and asyncpg
instrumentations add a span per command and statement beneath the last two.

A round serves several messages, each with its own trace: a step of the round (one Redis call, one
transaction) gets a span in each message's trace, and runs under the first one's. Nothing is built
for a message whose trace is not being recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from vmsched_placement import Decision, DecisionContext, Fleet, PlacementRequest, decide

tracer = trace.get_tracer("vmsched_scheduler")

DECISION_SPAN = "vmsched.decide"
CLAIM_SPAN = "vmsched.claim"
COMMIT_SPAN = "vmsched.commit"
STEP_SPANS = {"claim": CLAIM_SPAN, "commit": COMMIT_SPAN}


def recording(trace_context: otel_context.Context | None) -> bool:
    return trace_context is not None and trace.get_current_span(trace_context).is_recording()


def traced_decide(
    fleet: Fleet,
    request: PlacementRequest,
    context: DecisionContext,
    trace_context: otel_context.Context | None,
    *,
    fallbacks: int,
) -> Decision:
    """:func:`decide`, in a span carrying the strategy and the hosts considered, rejected and chosen
    (when the message's trace is recorded)."""
    if not recording(trace_context):
        return decide(fleet, request, context, fallbacks=fallbacks)
    with tracer.start_as_current_span(DECISION_SPAN, context=trace_context) as span:
        decision = decide(fleet, request, context, fallbacks=fallbacks)
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


@dataclass
class StepSpans:
    """One span per recorded message around a step of the round."""

    name: str
    spans: list[tuple[int, Span]] = field(default_factory=list)  # (position of its first item, span)
    positions: list[list[int]] = field(default_factory=list)  # items of each span's message

    def outcomes(self, outcomes: Sequence[str]) -> None:
        """Set each span's outcome attribute: the distinct outcomes of its message's items."""
        for (_, span), items in zip(self.spans, self.positions, strict=True):
            seen = sorted({outcomes[i] for i in items if i < len(outcomes)})
            span.set_attribute(f"vmsched.{self.name}.outcome", ",".join(seen))


@contextlib.contextmanager
def traced_step(name: str, contexts: Sequence[otel_context.Context | None]) -> Iterator[StepSpans]:
    """Spans of step ``name`` for the messages among ``contexts`` (one per item) being recorded."""
    step = StepSpans(name)
    by_context: dict[int, int] = {}
    for position, trace_context in enumerate(contexts):
        if not recording(trace_context):
            continue
        assert trace_context is not None
        key = id(trace_context)
        if key not in by_context:
            by_context[key] = len(step.spans)
            span = tracer.start_span(STEP_SPANS[name], context=trace_context)
            step.spans.append((position, span))
            step.positions.append([])
        step.positions[by_context[key]].append(position)
    token = otel_context.attach(trace.set_span_in_context(step.spans[0][1])) if step.spans else None
    try:
        yield step
    finally:
        if token is not None:
            otel_context.detach(token)
        for _, span in step.spans:
            span.end()
