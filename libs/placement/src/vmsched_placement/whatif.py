"""What-if, on a fleet of the caller's own: where VMs would land, and how many more of one shape fit.

Nomad's ``job plan``: nothing is claimed, published or written; the answers are ``decide``'s own (the
same filters, weighers and strategies a scheduler runs), so a simulation says what a scheduler would
do with the same snapshot, cursor and randomness. The caller hands a fleet it may change: ``simulate``
books each placed VM on it, so each VM is decided against what the earlier ones left, as in a round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from vmsched_contract.hierarchy import POD_LABEL, ZONE_LABEL
from vmsched_contract.strategy import Strategy
from vmsched_domain.storage import per_pool
from vmsched_placement.engine import NO_AVAILABLE_AGENTS, Decision, decide, rejected_examples
from vmsched_placement.filters import FILTERS
from vmsched_placement.fleet import Fleet
from vmsched_placement.model import DecisionContext, Demand, PlacementRequest, RequestVector


@dataclass(frozen=True, slots=True)
class Simulated:
    """One VM's simulated decision; ``examples`` (a few hosts per rule, with the rule's reason) only
    when it would fit nowhere."""

    decision: Decision
    examples: Mapping[str, list[tuple[str, str]]]


def simulate(
    fleet: Fleet,
    requests: Sequence[PlacementRequest],
    context: DecisionContext,
    *,
    project_pods: Mapping[str, int] | None = None,
) -> list[Simulated]:
    """Decide each request in order on ``fleet``, booking each placed VM on it before the next is
    decided. Round-robin requests take consecutive cursors from ``context.round_robin_cursor``, as the
    VMs of one scheduling round do. ``project_pods`` (the requests' project's VMs per pod, as a
    scheduler counts them) are handed to ``user_concentrated`` requests, each placed VM counted in its
    host's pod for the requests after it."""
    cursor = context.round_robin_cursor
    pods = dict(project_pods or {})
    outcomes: list[Simulated] = []
    for asked in requests:
        own = context
        if asked.strategy is Strategy.ROUND_ROBIN:
            own, cursor = replace(context, round_robin_cursor=cursor), cursor + 1
        request = replace(asked, project_pods=dict(pods)) if asked.strategy is Strategy.USER_CONCENTRATED else asked
        decision = decide(fleet, request, own)
        if decision.host_id is not None:
            host = fleet.host(decision.host_id)
            if host is not None and (pod := host.labels.get(POD_LABEL)) is not None:
                pods[pod] = pods.get(pod, 0) + 1
            fleet.allocate(decision.host_id, request.demand, per_pool(request.volumes, decision.volumes))
            outcomes.append(Simulated(decision, {}))
        else:
            examples = rejected_examples(fleet, request, own) if decision.considered else {}
            outcomes.append(Simulated(decision, examples))
    return outcomes


def unplaced_detail(decision: Decision) -> str:
    """An unschedulable decision in one line: the hosts known and the count each rule rejected first."""
    if decision.reason == NO_AVAILABLE_AGENTS:
        return f"no online host among {decision.considered} known"
    counts = ", ".join(f"{rule}: {count}" for rule, count in decision.rejections.items())
    return f"none of {decision.considered} hosts fits ({counts})"


@dataclass(frozen=True, slots=True)
class HostRoom:
    """How many more VMs of a shape one host takes; when none, the first rule that refuses the host."""

    host_id: str
    zone: str | None
    fits: int
    refused_by: str | None


def capacity(
    fleet: Fleet, shape: Demand, context: DecisionContext, *, networks: frozenset[str] = frozenset()
) -> list[HostRoom]:
    """Per host (in id order), how many more VMs of ``shape`` needing ``networks`` (no labels,
    selector or tolerations) it takes: 0 where a filter refuses it, else the whole copies that fit
    in every resource asked for.

    The same as placing copies one by one until none fits (a test proves it): the filters other
    than the resources' do not change as copies land, and each copy takes ``shape`` of every
    resource, so a host's count is the least of ``free // asked`` over the resources asked for.
    Raises ``ValueError`` for a shape that asks for nothing (any number of those fits).
    """
    if not any(shape.as_tuple()):
        raise ValueError("a shape must ask for some cpu, memory, disk or gpu")
    request = PlacementRequest(
        vm_id="capacity", name="capacity", demand=shape, labels={}, strategy=Strategy.BEST_FIT, networks=networks
    )
    vector = RequestVector.of(request, context)
    columns = fleet.columns
    count = len(columns)
    refused = np.full(count, -1, dtype=np.int64)
    for position in reversed(range(len(FILTERS))):
        passes = FILTERS[position].mask(columns, vector)
        if passes is not None:
            refused[~passes] = position  # earlier filters overwrite later ones
    fits = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    for row, asked in enumerate(shape.as_tuple()):
        if asked > 0:
            whole = np.floor_divide(np.maximum(columns.free[row], 0.0), float(asked)).astype(np.int64)
            np.minimum(fits, whole, out=fits)
    fits[refused >= 0] = 0
    return [
        HostRoom(
            host_id=host.id,
            zone=host.labels.get(ZONE_LABEL),
            fits=int(room),
            refused_by=None if first < 0 else FILTERS[first].NAME,
        )
        for host, room, first in zip(columns.hosts, fits.tolist(), refused.tolist(), strict=True)
    ]
