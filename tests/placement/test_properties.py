"""Properties of ``decide`` and ``explain`` on random fleets, checked against the plain-Python reference."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.placement.support import (
    HOST_IDS,
    context,
    contexts,
    healthy_host_states,
    host,
    host_lists,
    host_states,
    placement_requests,
    reference_best_fit,
    reference_eligible,
    reference_first_failure,
    reference_least_loaded,
    reference_least_utilized,
    reference_online,
    reference_penalty,
    reference_preferred,
    reference_reason,
    reference_tolerated,
    request,
)
from vmsched_contract.strategy import Strategy
from vmsched_placement import (
    DecisionContext,
    Fleet,
    HostState,
    PlacementRequest,
    decide,
    engine,
    explain,
)


def latest(hosts: list[HostState]) -> dict[str, HostState]:
    return {h.id: h for h in hosts}


@settings(deadline=None)
@given(host_lists, placement_requests(), contexts())
def test_decide_agrees_with_the_reference_on_who_passes_and_why_not(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    by_id = latest(hosts)
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    eligible = reference_eligible(hosts, req, ctx)
    failures = Counter(reference_first_failure(h, req, ctx) for h in by_id.values())
    failures.pop(None, None)

    assert decision.considered == len(by_id)
    assert decision.eligible == len(eligible)
    assert dict(decision.rejections) == dict(failures)
    assert sum(decision.rejections.values()) == decision.considered - decision.eligible
    if eligible:
        assert decision.host_id is not None
        assert decision.reason is None
        assert decision.ranked[0] == decision.host_id
        preferred = {h.id for h in reference_preferred(hosts, req, ctx)}
        assert decision.preferred == (len(preferred) if decision.preferences else len(eligible))
        assert set(decision.ranked) <= preferred
        assert len(decision.ranked) == min(5, len(preferred))
        assert len(set(decision.ranked)) == len(decision.ranked)
        for host_id in decision.ranked:
            assert reference_first_failure(by_id[host_id], req, ctx) is None
    else:
        assert decision.host_id is None
        assert decision.ranked == ()
        online = any(reference_online(h, ctx) for h in by_id.values())
        assert decision.reason == reference_reason(failures, online)


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.LEAST_LOADED), contexts())
def test_least_loaded_ranks_by_lowest_utilisation_then_lowest_id(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    expected = sorted((reference_least_loaded(h, ctx.weights), h.id) for h in reference_preferred(hosts, req, ctx))
    assert decision.ranked == tuple(host_id for _, host_id in expected[:5])
    if expected:
        assert decision.score == expected[0][0]


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.LEAST_UTILIZED), contexts())
def test_least_utilized_ranks_by_lowest_measured_load_then_lowest_id(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    expected = sorted((reference_least_utilized(h, ctx.weights), h.id) for h in reference_preferred(hosts, req, ctx))
    assert decision.ranked == tuple(host_id for _, host_id in expected[:5])
    if expected:
        assert decision.score == expected[0][0]


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.LEAST_UTILIZED), contexts())
def test_least_utilized_without_measurements_is_least_loaded(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    unmeasured = [replace(h, usage=None) for h in hosts]
    utilized = decide(Fleet.from_hosts(unmeasured), req, ctx)
    loaded = decide(Fleet.from_hosts(unmeasured), replace(req, strategy=Strategy.LEAST_LOADED), ctx)
    assert (utilized.ranked, utilized.scores) == (loaded.ranked, loaded.scores)


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.LEAST_UTILIZED), contexts(), st.data())
def test_least_utilized_scores_stay_current_as_vms_are_booked_and_released(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext, data: st.DataObject
) -> None:
    """A round books each decision on its fleet before the next: the columns the strategy reads must
    then equal a fleet built afresh from the booked hosts (allocation since the measurement counted)."""
    fleet = Fleet.from_hosts(hosts)
    for _ in range(data.draw(st.integers(1, 6))):
        decision = decide(fleet, req, ctx)
        if decision.host_id is None:
            assert not reference_preferred(list(fleet), req, ctx)  # none is left to take it
            break
        if data.draw(st.booleans()):
            fleet.allocate(decision.host_id, req.demand)
        else:
            fleet.release(decision.host_id, req.demand)
        afresh = decide(Fleet.from_hosts(list(fleet)), req, ctx)
        again = decide(fleet, req, ctx)
        assert (again.ranked, again.scores) == (afresh.ranked, afresh.scores)
        expected = sorted(
            (reference_least_utilized(h, ctx.weights), h.id) for h in reference_preferred(list(fleet), req, ctx)
        )
        assert again.ranked == tuple(host_id for _, host_id in expected[:5])


@settings(deadline=None)
@given(host_lists, placement_requests(Strategy.BEST_FIT), contexts())
def test_best_fit_ranks_by_least_capacity_left_then_lowest_id(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    expected = sorted((reference_best_fit(h, req, ctx.weights), h.id) for h in reference_preferred(hosts, req, ctx))
    assert decision.ranked == tuple(host_id for _, host_id in expected[:5])
    if expected:
        assert decision.score == expected[0][0]


@settings(deadline=None)
@given(
    host_lists,
    placement_requests(Strategy.ROUND_ROBIN),
    st.integers(0, 10**6),
    st.lists(st.booleans(), min_size=1, max_size=40),
)
def test_round_robin_visits_every_eligible_host_once_per_cycle_across_two_schedulers(
    hosts: list[HostState], req: PlacementRequest, start: int, which_scheduler: list[bool]
) -> None:
    """Two schedulers, each with its own copy of the fleet, share one counter and take its values in
    any interleaving: every run of len(eligible) consecutive values covers each eligible host once."""
    ctx = context()
    eligible = [h.id for h in reference_preferred(hosts, req, ctx)]
    schedulers = (Fleet.from_hosts(hosts), Fleet.from_hosts(hosts))
    picks = []
    for offset, second in enumerate(which_scheduler):
        fleet = schedulers[int(second)]
        picks.append(decide(fleet, req, replace_cursor(ctx, start + offset)).host_id)
    if not eligible:
        assert set(picks) == {None}
        return
    assert set(picks) <= set(eligible)
    # Fewer picks than eligible hosts make no full cycle: the loop below checks none.
    for begin in range(0, len(picks) - len(eligible) + 1):
        assert sorted(str(p) for p in picks[begin : begin + len(eligible)]) == sorted(eligible)


def replace_cursor(ctx: DecisionContext, cursor: int) -> DecisionContext:
    return replace(ctx, round_robin_cursor=cursor)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.one_of(healthy_host_states(), host_states()), min_size=1, max_size=6),
    placement_requests(Strategy.RANDOM),
)
def test_random_reaches_every_eligible_host(hosts: list[HostState], req: PlacementRequest) -> None:
    fleet = Fleet.from_hosts(hosts)
    ctx = context()
    eligible: set[str | None] = {h.id for h in reference_preferred(hosts, req, ctx)}
    picks = {decide(fleet, req, replace(ctx, rng=random.Random(seed))).host_id for seed in range(300)}
    assert picks == (eligible or {None})


@settings(deadline=None)
@given(host_lists, placement_requests(), contexts())
def test_explain_agrees_with_decide(hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext) -> None:
    fleet = Fleet.from_hosts(hosts)
    decision = decide(fleet, req, replace(ctx, rng=random.Random(0)))
    verdicts = explain(fleet, req, ctx)
    by_id = latest(hosts)

    assert [v.host_id for v in verdicts] == sorted(by_id)
    assert sum(v.passed for v in verdicts) == decision.eligible
    assert dict(Counter(v.filter for v in verdicts if not v.passed)) == dict(decision.rejections)
    for verdict in verdicts:
        assert verdict.filter == reference_first_failure(by_id[verdict.host_id], req, ctx)
        assert verdict.passed == (verdict.reason is None)
        if verdict.reason is not None:
            assert verdict.reason.startswith(f"{verdict.filter}: ")
    passed = [v for v in verdicts if v.passed]
    for verdict in passed:
        assert len(verdict.penalties) == reference_penalty(by_id[verdict.host_id], req)
    if req.strategy in (Strategy.LEAST_LOADED, Strategy.BEST_FIT, Strategy.LEAST_UTILIZED) and passed:
        best = min(passed, key=lambda v: (len(v.penalties), v.score, v.host_id))
        assert (best.host_id, best.score) == (decision.host_id, decision.score)
    if decision.host_id is not None:
        assert decision.host_id in {v.host_id for v in passed}


@settings(deadline=None)
@given(st.lists(st.sampled_from(HOST_IDS), unique=True, max_size=10), contexts())
def test_the_same_fleet_and_request_give_the_same_decision(host_ids: list[str], ctx: DecisionContext) -> None:
    hosts = [host(host_id, used_cpu=len(host_id) % 3) for host_id in host_ids]
    for strategy in Strategy:
        req = request(strategy=strategy)
        first = decide(Fleet.from_hosts(hosts), req, replace(ctx, rng=random.Random(1)))
        again = decide(Fleet.from_hosts(reversed(hosts)), req, replace(ctx, rng=random.Random(1)))
        assert first == again


@settings(deadline=None)
@given(host_lists, placement_requests(), contexts())
def test_never_a_host_with_a_noschedule_taint_the_vm_does_not_tolerate(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    decision = decide(Fleet.from_hosts(hosts), req, ctx)
    by_id = latest(hosts)
    refused = {
        h.id
        for h in by_id.values()
        if any(t.effect == "NoSchedule" and not reference_tolerated(t, req) for t in h.taints)
    }
    assert refused.isdisjoint(decision.ranked)
    assert decision.eligible <= len(by_id) - len(refused)


@settings(deadline=None)
@given(host_lists, placement_requests(), contexts())
def test_weighers_never_change_the_eligible_set(
    hosts: list[HostState], req: PlacementRequest, ctx: DecisionContext
) -> None:
    """With and without every weigher: the same eligible hosts, rejections and reason; with them,
    the VM goes to a host no other eligible host is less penalised than."""
    by_id = latest(hosts)
    weighed = decide(Fleet.from_hosts(hosts), req, replace(ctx, rng=random.Random(0)))
    with no_weighers():
        plain = decide(Fleet.from_hosts(hosts), req, replace(ctx, rng=random.Random(0)))
    assert (weighed.eligible, dict(weighed.rejections), weighed.reason) == (
        plain.eligible,
        dict(plain.rejections),
        plain.reason,
    )
    assert (weighed.host_id is None) == (plain.host_id is None)
    if weighed.host_id is not None:
        eligible = reference_eligible(hosts, req, ctx)
        assert reference_penalty(by_id[weighed.host_id], req) == min(reference_penalty(h, req) for h in eligible)


@contextmanager
def no_weighers() -> Iterator[None]:
    """The engine as it was before weighers: it reads its module's ``WEIGHERS`` at every decision."""
    saved = getattr(engine, "WEIGHERS")  # noqa: B009 (not re-exported: mypy would refuse the attribute)
    setattr(engine, "WEIGHERS", ())  # noqa: B010
    try:
        yield
    finally:
        setattr(engine, "WEIGHERS", saved)  # noqa: B010
