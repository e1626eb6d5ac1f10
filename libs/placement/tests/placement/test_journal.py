"""The decision journal rebuilds exactly what each decision read: the same hosts field for field, the
same request and context, so the engine decides the same host with the same score again."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from libs.placement.tests.placement.support import (
    HOST_IDS,
    TIMEOUT,
    contexts,
    group,
    host_lists,
    host_states,
    placement_requests,
)
from vmsched_common.groups import GroupPolicy
from vmsched_common.settings import Strategy
from vmsched_placement import DecisionContext, Demand, Fleet, HostState, PlacementRequest, decide
from vmsched_placement.journal import Journal, rebuild, seeded, unpack

Step = tuple[list[tuple[str, object]], PlacementRequest, DecisionContext, bool]


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, object]]:
    """What happens to a fleet between two decisions: hosts rewritten, removed, or booked."""
    out: list[tuple[str, object]] = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["upsert", "remove", "book"]))
        host_id = draw(st.sampled_from(HOST_IDS))
        if kind == "upsert":
            out.append((kind, draw(host_states(host_id))))
        else:
            out.append((kind, host_id))
    return out


@settings(max_examples=60, deadline=None)
@given(
    host_lists,
    st.lists(st.tuples(steps(), placement_requests(), contexts(), st.booleans()), min_size=1, max_size=12),
    st.integers(1, 5),
)
def test_every_decision_rebuilt_from_its_checkpoint_decides_the_same(
    hosts: list[HostState], decisions: list[Step], every: int
) -> None:
    fleet = Fleet.from_hosts(hosts)
    first = decisions[0][2]
    journal = Journal(first.weights, TIMEOUT, checkpoint_every=every, at_least_fleet=False)
    made = []
    for number, (changes, request, context, grouped) in enumerate(decisions):
        for kind, what in changes:
            if kind == "upsert":
                assert isinstance(what, HostState)
                fleet.upsert(what)
            elif kind == "remove":
                fleet.remove(str(what))
            elif str(what) in fleet:
                fleet.allocate(str(what), Demand(1, 256, 1))
        if grouped:
            request = replace(request, group=group(GroupPolicy.SPREAD, {HOST_IDS[0]: 2}))
        seed = number * 7919 if request.strategy is Strategy.RANDOM else None
        own = seeded(replace(context, weights=first.weights), seed)
        decision = decide(fleet, request, own)
        entry = journal.note(fleet, request, own, seed)
        made.append((entry, list(fleet), decision))
        if decision.host_id is not None:
            fleet.allocate(decision.host_id, request.demand)  # the round's booking, before the next decision
    entries = [entry for entry, _, _ in made]
    for position, (_entry, seen, decision) in enumerate(made):
        start = max(i for i in range(position + 1) if entries[i].checkpoint)
        inputs = rebuild([e.body for e in entries[start : position + 1]], "vm", "vm")
        assert list(inputs.fleet) == seen
        again = decide(inputs.fleet, inputs.request, inputs.context)
        assert (again.host_id, again.score, again.ranked) == (decision.host_id, decision.score, decision.ranked)
    assert all(("k" in unpack(e.body)) == e.checkpoint for e in entries)
