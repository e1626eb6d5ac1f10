"""``decide``, ``rejected_examples`` and ``explain``: the filters over the fleet, the weighers'
preference among the hosts that pass, then the strategy.

A decision is a few vectorised passes over the columns: each filter yields a boolean mask, the
running AND of the masks is the eligible set, and counting it after each filter gives how many
hosts each filter rejected first. Per-host reasons are spelled out only for a few hosts per rule
(``rejected_examples``, when no host fits) or for every host when a person asks (``explain``).

Then the planner (``planners.py``) may narrow the eligible hosts to one cluster's; then the
preference: each weigher (``weighers/``) may penalise some hosts; among the eligible
hosts, only those of the lowest total penalty are handed to the strategy (lexicographic: soft rules
first, then the score). Weighers never reject: the eligible set and ``rejections`` are the filters'.

When no host fits, the decision's ``reason`` is ``no_available_agents`` if no host is online, else
the last rule (in filter order) that rejected a host: the one that stopped the hosts that came
closest, which is the answer a person can act on ("the zone's hosts are full on cpu" rather than
"most hosts are in another zone").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from vmsched_contract.strategy import Strategy
from vmsched_placement.filters import AVAILABILITY_FILTER, FILTERS
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns, FloatArray
from vmsched_placement.model import DecisionContext, PlacementRequest, RequestVector
from vmsched_placement.planners import planned
from vmsched_placement.strategies import strategy_for
from vmsched_placement.weighers import WEIGHERS

NO_AVAILABLE_AGENTS = "no_available_agents"

_NO_REJECTIONS: Mapping[str, int] = MappingProxyType({})
# Each filter with its ``mask_among``, if it has one (see filters.base).
_AMONG = tuple(getattr(host_filter, "mask_among", None) for host_filter in FILTERS)


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one placement decision."""

    strategy: Strategy
    host_id: str | None  # the chosen host; None when the VM is unschedulable
    score: float | None  # the chosen host's score (lower is better); None for unscored strategies
    ranked: tuple[str, ...]  # the chosen host, then up to ``fallbacks`` more in strategy order
    scores: tuple[float, ...] | None  # the score of each ranked host; None for unscored strategies
    reason: str | None  # None when placed; "no_available_agents", or the name of a filter
    rejections: Mapping[str, int]  # filter name -> hosts that filter rejected first (non-zero only)
    considered: int  # hosts in the fleet
    eligible: int  # hosts that passed every filter
    # Weigher name -> eligible hosts it penalised (non-zero only); empty when no weigher had a say.
    preferences: Mapping[str, int] = field(default_factory=lambda: _NO_REJECTIONS)
    preferred: int = 0  # eligible hosts of the lowest penalty: those the strategy ranked
    cluster: str | None = None  # the cluster the planner chose (cluster_first), None: no narrowing
    volumes: tuple[str, ...] = ()  # the pool of each volume the VM asks for, on the chosen host


@dataclass(frozen=True, slots=True)
class HostVerdict:
    """One host's answer for one request: passed, or the first filter that rejected it and why."""

    host_id: str
    passed: bool
    filter: str | None
    reason: str | None
    score: float | None  # the strategy's score when passed (None for unscored strategies)
    penalties: tuple[str, ...] = ()  # when passed: each weigher's reason for penalising it


def decide(fleet: Fleet, request: PlacementRequest, context: DecisionContext, *, fallbacks: int = 4) -> Decision:
    """Pick a host for ``request``, and up to ``fallbacks`` more to try if its claim is lost.

    Pure: reads the fleet, the request and the context (time, weights, rng, cursor) only. Ties
    go to the lowest host id. When no host passes every filter, ``reason`` is ``no_available_agents``
    if none passes the ``offline`` filter, else the last filter that rejected a host.
    Raises ``UnknownStrategyError`` for a strategy no plugin implements.
    """
    strategy = strategy_for(request.strategy)
    vector = RequestVector.of(request, context)
    columns = fleet.columns
    considered = len(columns)
    eligible: BoolArray | None = None
    remaining = considered
    available: int | None = None
    rejections: dict[str, int] = {}  # in filter order: the last key is the deepest rule that rejected
    for host_filter, among in zip(FILTERS, _AMONG, strict=True):
        if remaining == 0 and available is not None:
            break
        passes = host_filter.mask(columns, vector) if among is None else among(columns, vector, eligible)
        if host_filter.NAME == AVAILABILITY_FILTER:
            available = considered if passes is None else int(np.count_nonzero(passes))
        if passes is None or remaining == 0:
            continue
        if eligible is None:
            eligible = columns.scratch.eligible
            np.copyto(eligible, passes)
        else:
            np.logical_and(eligible, passes, out=eligible)
        still = int(np.count_nonzero(eligible))
        if still < remaining:
            rejections[host_filter.NAME] = remaining - still
            remaining = still
    if remaining == 0:
        return Decision(
            strategy=request.strategy,
            host_id=None,
            score=None,
            ranked=(),
            scores=None,
            reason=NO_AVAILABLE_AGENTS if not available else next(reversed(rejections)),
            rejections=MappingProxyType(rejections) if rejections else _NO_REJECTIONS,
            considered=considered,
            eligible=0,
        )
    if eligible is None:
        eligible = columns.scratch.eligible
        eligible.fill(True)
    handed, handed_count, cluster = planned(request.planner, columns, eligible, remaining)
    preferred, preferred_count, preferences = prefer(columns, vector, handed, handed_count)
    ranking = strategy.rank(columns, vector, preferred, preferred_count, context, 1 + max(0, fallbacks))
    ids = columns.ids
    ranked = tuple(ids[index] for index in ranking.indices)
    volumes = (columns.storage.assignment(ranking.indices[0], request.volumes) or ()) if request.volumes else ()
    return Decision(
        strategy=request.strategy,
        host_id=ranked[0],
        score=ranking.score,
        ranked=ranked,
        scores=ranking.scores,
        reason=None,
        rejections=MappingProxyType(rejections) if rejections else _NO_REJECTIONS,
        considered=considered,
        eligible=remaining,
        preferences=MappingProxyType(preferences) if preferences else _NO_REJECTIONS,
        preferred=preferred_count,
        cluster=cluster,
        volumes=volumes,
    )


def prefer(
    columns: FleetColumns, request: RequestVector, eligible: BoolArray, eligible_count: int
) -> tuple[BoolArray, int, dict[str, int]]:
    """The eligible hosts of the lowest total penalty and their count, and per weigher the eligible
    hosts it penalised. ``eligible`` itself (never written) when no weigher tells eligible hosts apart."""
    opinions = [(w.NAME, penalty) for w in WEIGHERS if (penalty := w.penalty(columns, request)) is not None]
    if not opinions:
        return eligible, eligible_count, {}
    if len(opinions) == 1 and opinions[0][1].dtype == np.bool_:
        # The usual case, one yes-or-no rule: eligible and not penalised, in one pass.
        name, penalty = opinions[0]
        preferred = np.greater(eligible, penalty)
        count = int(np.count_nonzero(preferred))
        if count == eligible_count:
            return eligible, eligible_count, {}
        if count == 0:
            return eligible, eligible_count, {name: eligible_count}
        return preferred, count, {name: eligible_count - count}
    preferences: dict[str, int] = {}
    total: FloatArray = np.zeros(len(columns), dtype=np.float64)
    for name, penalty in opinions:
        hit = int(np.count_nonzero(np.logical_and(penalty, eligible)))
        if hit:
            preferences[name] = hit
            total += penalty
    if not preferences:
        return eligible, eligible_count, {}
    masked = np.where(eligible, total, np.inf)
    preferred = np.equal(masked, masked.min())
    return preferred, int(np.count_nonzero(preferred)), preferences


def rejected_examples(
    fleet: Fleet, request: PlacementRequest, context: DecisionContext, *, per_filter: int = 3
) -> dict[str, list[tuple[str, str]]]:
    """Up to ``per_filter`` hosts each filter rejected first, with the filter's reason: ``{"cpu":
    [("hv-07", "cpu: needs 8, 2 free (...)"), ...]}``. One pass of the masks, as ``decide`` makes,
    and a reason for a few hosts only: cheap enough for every unschedulable VM of a large fleet."""
    vector = RequestVector.of(request, context)
    columns = fleet.columns
    still = np.ones(len(columns), dtype=np.bool_)
    examples: dict[str, list[tuple[str, str]]] = {}
    for host_filter in FILTERS:
        passes = host_filter.mask(columns, vector)
        if passes is None:
            continue
        rejected_here = np.flatnonzero(still & ~passes)[:per_filter]
        if len(rejected_here):
            examples[host_filter.NAME] = [
                (columns.ids[index], host_filter.reason(fleet, int(index), vector)) for index in rejected_here.tolist()
            ]
        np.logical_and(still, passes, out=still)
    return examples


def explain(fleet: Fleet, request: PlacementRequest, context: DecisionContext) -> list[HostVerdict]:
    """Every host's verdict for ``request``, in host id order: the slow path, for people.

    Agrees with ``decide``: the passing hosts are exactly its eligible set, each rejected host
    is counted under the same filter, and a passing host's score is the one ``decide`` ranks by.
    Does not draw from ``context.rng``.
    """
    strategy = strategy_for(request.strategy)
    vector = RequestVector.of(request, context)
    columns = fleet.columns
    count = len(columns)
    first_failed = np.full(count, -1, dtype=np.int64)
    for position in reversed(range(len(FILTERS))):
        passes = FILTERS[position].mask(columns, vector)
        if passes is not None:
            first_failed[~passes] = position  # earlier filters overwrite later ones
    scores = strategy.scores(columns, vector, context)
    penalties = [(weigher, weigher.penalty(columns, vector)) for weigher in WEIGHERS]
    verdicts: list[HostVerdict] = []
    for index, (host_id, failed) in enumerate(zip(columns.ids, first_failed.tolist(), strict=True)):
        if failed < 0:
            score = None if scores is None else float(scores[index])
            why = tuple(
                weigher.reason(fleet, index, vector)
                for weigher, penalty in penalties
                if penalty is not None and penalty[index]
            )
            verdicts.append(HostVerdict(host_id, True, None, None, score, why))
        else:
            host_filter = FILTERS[failed]
            reason = host_filter.reason(fleet, index, vector)
            verdicts.append(HostVerdict(host_id, False, host_filter.NAME, reason, None))
    return verdicts


def verdict(fleet: Fleet, request: PlacementRequest, context: DecisionContext, host_id: str) -> HostVerdict | None:
    """One host's verdict for ``request``, as :func:`explain` gives it (without a score), computed
    for that host alone; None for a host the fleet does not know."""
    index = fleet.index_of(host_id)
    if index is None:
        return None
    vector = RequestVector.of(request, context)
    for host_filter in FILTERS:
        passes = host_filter.mask(fleet.columns, vector)
        if passes is not None and not passes[index]:
            return HostVerdict(host_id, False, host_filter.NAME, host_filter.reason(fleet, index, vector), None)
    return HostVerdict(host_id, True, None, None, None)
