"""The decision journal rebuilds exactly what each decision read: the same hosts field for field, the
same request and context, so the engine decides the same host with the same score again."""

from __future__ import annotations

import random
from dataclasses import fields, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement import support
from tests.placement.support import (
    HOST_IDS,
    NOW,
    TIMEOUT,
    contexts,
    group,
    host,
    host_lists,
    host_states,
    host_usages,
    placement_requests,
)
from vmsched_contract.groups import GroupPolicy
from vmsched_contract.strategy import Strategy
from vmsched_domain.storage import PoolRoom
from vmsched_domain.usage import MeasuredUsage
from vmsched_placement import DecisionContext, Demand, Fleet, HostState, PlacementRequest, Weights, decide
from vmsched_placement.journal import (
    Journal,
    PreemptionInputs,
    decode_host,
    decode_request,
    encode_host,
    encode_request,
    rebuild,
    replay_preemption,
    seeded,
    unpack,
)
from vmsched_placement.preemption import Resident, cheapest, drawn
from vmsched_placement.strategies import reads_measured_usage

Step = tuple[list[tuple[str, object]], PlacementRequest, DecisionContext, bool, float]

# Seconds between two decisions: the same round, a heartbeat's worth, just below, at and past the
# offline timeout (hosts that stop beating cross it; those that beat must stay online).
PAUSES = [0.0, 0.0, 0.5, 5.0, 14.9, TIMEOUT, 15.1, 40.0]
# A heartbeat's age when read: fresh (most), at the timeout's edge, or stale.
BEAT_AGES = [0.0, 0.0, 1.0, 2.5, 14.9, TIMEOUT, 15.1, 60.0]


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, object]]:
    """What happens to a fleet between two decisions: hosts rewritten, removed, booked, re-read with a
    new heartbeat (of some age at the next decision) or with a new measured usage."""
    out: list[tuple[str, object]] = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["upsert", "remove", "book", "beat", "beat", "measure"]))
        host_id = draw(st.sampled_from(HOST_IDS))
        if kind == "upsert":
            out.append((kind, draw(host_states(host_id))))
        elif kind == "beat":
            out.append((kind, (host_id, draw(st.sampled_from(BEAT_AGES)))))
        elif kind == "measure":
            out.append((kind, (host_id, draw(host_usages(draw(st.integers(0, 16)), draw(st.integers(0, 8192)))))))
        else:
            out.append((kind, host_id))
    return out


def change(fleet: Fleet, kind: str, what: object, now: float) -> None:
    if kind == "upsert":
        assert isinstance(what, HostState)
        fleet.upsert(what)
        return
    if kind == "remove":
        fleet.remove(str(what))
        return
    host_id = str(what[0]) if isinstance(what, tuple) else str(what)
    found = fleet.host(host_id)
    if found is None:
        return
    if kind == "book":
        fleet.allocate(host_id, Demand(1, 256, 1))
    elif kind == "beat":
        assert isinstance(what, tuple)
        fleet.upsert(replace(found, last_heartbeat=now - float(what[1])))
    else:
        assert isinstance(what, tuple)
        fleet.upsert(replace(found, usage=what[1]))


def as_read(host: HostState, context: DecisionContext, usage: bool) -> tuple[object, ...]:
    """What a decision reads of ``host``: every field, its heartbeat as the offline verdict at the
    decision's instant, its measured usage only when ``usage``."""
    fresh = context.now - host.last_heartbeat <= context.offline_timeout
    return (replace(host, last_heartbeat=0.0, usage=host.usage if usage else None), fresh)


@settings(max_examples=60, deadline=None)
@given(
    host_lists,
    st.lists(
        st.tuples(steps(), placement_requests(), contexts(), st.booleans(), st.sampled_from(PAUSES)),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 5),
)
def test_every_decision_rebuilt_from_its_checkpoint_decides_the_same(
    hosts: list[HostState], decisions: list[Step], every: int
) -> None:
    """Every decision's replay chooses the same hosts with the same scores; its hosts are the same
    as the decision read them (heartbeats by their verdict at its instant, measured usage where its
    strategy reads it); and another strategy decides on them as it would have on the real fleet,
    unless it reads a measured usage the decision did not (``usage_exact_for`` says so)."""
    fleet = Fleet.from_hosts(hosts)
    first = decisions[0][2]
    journal = Journal(first.weights, TIMEOUT, checkpoint_every=every, at_least_fleet=False)
    made = []
    now = NOW
    for number, (changes, request, context, grouped, pause) in enumerate(decisions):
        now += pause
        for kind, what in changes:
            change(fleet, kind, what, now)
        if grouped:
            request = replace(request, group=group(GroupPolicy.SPREAD, {HOST_IDS[0]: 2}))
        seed = number * 7919 if request.strategy is Strategy.RANDOM else None
        own = seeded(replace(context, weights=first.weights, now=now), seed)
        decision = decide(fleet, request, own)
        entry = journal.note(fleet, request, own, seed)
        made.append((entry, list(fleet), decision, request, replace(own, rng=random.Random(0))))
        if decision.host_id is not None:
            fleet.allocate(decision.host_id, request.demand)  # the round's booking, before the next decision
    entries = [entry for entry, *_ in made]
    for position, (_entry, seen, decision, request, own) in enumerate(made):
        start = max(i for i in range(position + 1) if entries[i].checkpoint)
        inputs = rebuild([e.body for e in entries[start : position + 1]], "vm", "vm")
        usage = inputs.usage_as_seen
        assert usage or not reads_measured_usage(request.strategy)
        assert [as_read(h, inputs.context, usage) for h in inputs.fleet] == [as_read(h, own, usage) for h in seen]
        again = decide(inputs.fleet, inputs.request, inputs.context)
        assert (again.host_id, again.score, again.ranked) == (decision.host_id, decision.score, decision.ranked)
        for other in (s for s in Strategy if s is not Strategy.RANDOM and inputs.usage_exact_for(s)):
            what_if = decide(inputs.fleet, replace(inputs.request, strategy=other), inputs.context)
            real = decide(Fleet.from_hosts(seen), replace(request, strategy=other), own)
            assert (what_if.host_id, what_if.score, what_if.ranked) == (real.host_id, real.score, real.ranked)
    assert all(("k" in unpack(e.body)) == e.checkpoint for e in entries)


@settings(max_examples=40, deadline=None)
@given(host_lists, placement_requests(), contexts())
def test_only_strategies_that_say_so_read_the_measured_usage(
    hosts: list[HostState], request: PlacementRequest, context: DecisionContext
) -> None:
    """The journal keeps usage only for decisions whose strategy reads it: every other strategy
    chooses the same hosts with the same scores whatever the hosts' measured usage."""
    measured = Fleet.from_hosts(hosts)
    unmeasured = Fleet.from_hosts(replace(h, usage=None) for h in hosts)
    blind = [strategy for strategy in Strategy if not reads_measured_usage(strategy)]
    assert Strategy.LEAST_LOADED in blind
    for strategy in blind:
        asked = replace(request, strategy=strategy)
        one = decide(measured, asked, replace(context, rng=random.Random(1)))
        two = decide(unmeasured, asked, replace(context, rng=random.Random(1)))
        assert (one.host_id, one.score, one.ranked) == (two.host_id, two.score, two.ranked)


def test_heartbeats_that_keep_a_host_online_are_not_journaled() -> None:
    """A host re-read every 5 s stays online: after the checkpoint its entries hold nothing of it
    until it falls silent past the timeout; then its real, stale, heartbeat instant is written."""
    fleet = Fleet.from_hosts([host("hv-01", heartbeat_age=0.0)])
    journal = Journal(Weights(), TIMEOUT)
    bodies = [journal.note(fleet, support.request(), support.context(), None).body]
    for second in range(5, 60, 5):
        found = fleet.host("hv-01")
        assert found is not None
        fleet.upsert(replace(found, last_heartbeat=NOW + second))
        bodies.append(journal.note(fleet, support.request(), support.context(now=NOW + second + 1), None).body)
    assert [unpack(b)["h"] for b in bodies[1:]] == [{}] * 11
    silent = NOW + 55 + TIMEOUT + 0.5
    bodies.append(journal.note(fleet, support.request(), support.context(now=silent), None).body)
    assert unpack(bodies[-1])["h"] == {"hv-01": {"7": NOW + 55}}
    found = fleet.host("hv-01")
    assert found is not None
    assert rebuild(bodies, "vm", "vm").fleet.host("hv-01") == found  # its real, stale, instant
    fleet.upsert(replace(found, last_heartbeat=silent + 1))  # back
    bodies.append(journal.note(fleet, support.request(), support.context(now=silent + 2), None).body)
    assert unpack(bodies[-1])["h"] == {"hv-01": {"7": None}}
    assert rebuild(bodies, "vm", "vm").fleet.host("hv-01") == replace(found, last_heartbeat=silent + 2)


def test_measured_usage_waits_for_a_decision_that_reads_it() -> None:
    fleet = Fleet.from_hosts([host("hv-01", usage=MeasuredUsage(1.0, 512.0))])
    journal = Journal(Weights(), TIMEOUT)
    loaded, utilized = support.request(), support.request(strategy=Strategy.LEAST_UTILIZED)
    bodies = [journal.note(fleet, loaded, support.context(), None).body]
    found = fleet.host("hv-01")
    assert found is not None
    fleet.upsert(replace(found, usage=MeasuredUsage(3.5, 2048.0)))
    bodies.append(journal.note(fleet, loaded, support.context(), None).body)
    assert unpack(bodies[-1])["h"] == {}
    inputs = rebuild(bodies, "vm", "vm")
    assert not inputs.usage_as_seen
    assert inputs.usage_exact_for(Strategy.BEST_FIT)
    assert not inputs.usage_exact_for(Strategy.LEAST_UTILIZED)
    rebuilt = inputs.fleet.host("hv-01")
    assert rebuilt is not None
    assert rebuilt.usage == MeasuredUsage(1.0, 512.0)  # the last journaled
    bodies.append(journal.note(fleet, utilized, support.context(), None).body)
    assert unpack(bodies[-1])["h"] == {"hv-01": {"12": [3.5, 2048.0, 0, 0]}}
    inputs = rebuild(bodies, "vm", "vm")
    # Every field as it is (the fresh heartbeat rebuilt as the decision's instant).
    assert inputs.usage_as_seen
    assert list(inputs.fleet) == [replace(h, last_heartbeat=NOW) for h in fleet]


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


def test_entries_written_before_the_cloud_fields_rebuild_with_their_defaults() -> None:
    """A host row and a request of a journal written before networks, dedication, the planner and the
    cluster exclusion (shorter rows, fewer keys) decode as what the engine read then: none of them."""
    placed = replace(
        support.host("hv-1", networks=["vlan-100"], dedicated_to="p1"),
        storage_pools=(PoolRoom("local", False, 100, 10, frozenset({"ssd"})),),
    )
    row = encode_host(placed)
    # networks, dedicated_to, then storage_pools were added last, in that order
    legacy_row = row[: [f.name for f in fields(HostState)].index("networks")]
    decoded = decode_host(legacy_row, NOW)
    assert (decoded.networks, decoded.dedicated_to, decoded.storage_pools) == (frozenset(), None, ())
    assert decode_host(row[:-1], NOW) == replace(placed, storage_pools=())  # written before storage pools
    assert decode_host(row, NOW) == placed
    asked = support.request(networks=["vlan-100"], project="p1", dedicated=True)
    encoded = encode_request(asked)
    assert decode_request(encoded, asked.vm_id, asked.name) == asked
    legacy = {key: value for key, value in encoded.items() if key not in ("n", "u", "pj", "dd", "pl", "xc")}
    old = decode_request(legacy, asked.vm_id, asked.name)
    assert (old.networks, old.project, old.dedicated, old.exclude_cluster_after) == (frozenset(), "", False, 0)
