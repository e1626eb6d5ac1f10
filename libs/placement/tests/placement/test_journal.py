"""The decision journal rebuilds exactly what each decision read: the same hosts field for field, the
same request and context, so the engine decides the same host with the same score again."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from libs.placement.tests.placement import support
from libs.placement.tests.placement.support import (
    HOST_IDS,
    NOW,
    TIMEOUT,
    contexts,
    group,
    host,
    host_lists,
    host_states,
    placement_requests,
)
from vmsched_common.groups import GroupPolicy
from vmsched_common.settings import Strategy
from vmsched_placement import DecisionContext, Demand, Fleet, HostState, PlacementRequest, Weights, decide
from vmsched_placement.journal import Journal, PreemptionInputs, rebuild, replay_preemption, seeded, unpack
from vmsched_placement.preemption import Resident, cheapest, drawn

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


def test_a_replica_idle_past_its_checkpoint_age_starts_again_at_a_checkpoint() -> None:
    fleet = Fleet.from_hosts([host("hv-01"), host("hv-02")])
    journal = Journal(Weights(), TIMEOUT, checkpoint_age=60.0)
    times = [NOW, NOW + 30, NOW + 59, NOW + 60, NOW + 61, NOW + 200]
    kinds = [journal.note(fleet, support.request(), support.context(now=t), None).checkpoint for t in times]
    # The first entry, then the first one 60 s or more after the last checkpoint.
    assert kinds == [True, False, False, True, False, True]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(0, 2)), min_size=1, max_size=12),
    st.integers(0, 2**63 - 1),
    st.integers(0, 5),
)
def test_a_preemption_rebuilt_from_its_entry_chooses_the_same_host_and_victims(
    vms: list[tuple[int, int, int]], seed: int, decisions_before: int
) -> None:
    """Residents spread over three full hosts (every host passes the other filters): the choice the
    scheduler draws, made again from the journal's entry (which keeps only the tied hosts' residents)."""
    residents: dict[str, list[Resident]] = {}
    for number, (host_number, cpu, priority) in enumerate(vms):
        residents.setdefault(f"hv-0{host_number}", []).append(
            Resident(f"vm-{number}", priority * 10, Demand(cpu, 0, 0))
        )
    hosts = [host(f"hv-0{n}", cpu=16, used_cpu=16) for n in range(4)]
    fleet = Fleet.from_hosts(hosts)
    wanted = support.request(cpu=4)
    journal = Journal(Weights(), TIMEOUT, checkpoint_every=2, at_least_fleet=False)
    entries = [journal.note(fleet, wanted, support.context(), None) for _ in range(decisions_before)]
    own = seeded(support.context(), seed)
    chosen, among = drawn(hosts, wanted.demand, 100, residents, seed)
    kept = {v.host_id: residents[v.host_id] for v in among}
    entries.append(journal.note(fleet, wanted, own, seed, PreemptionInputs(100, kept)))
    start = max(i for i, entry in enumerate(entries) if entry.checkpoint)
    inputs = rebuild([e.body for e in entries[start:]], "vm", "vm")
    assert inputs.preemption is not None
    assert replay_preemption(inputs) == chosen
    if chosen is not None:
        assert chosen == cheapest(hosts, wanted.demand, 100, residents, random.Random(seed))
