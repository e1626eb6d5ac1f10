"""Test helpers: small factories, a slow obviously-correct reference, hypothesis strategies."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from uuid import UUID

from hypothesis import strategies as st

from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_contract.messages import SelectorOperator
from vmsched_contract.planner import Planner
from vmsched_contract.strategy import Strategy
from vmsched_domain.groups import GroupRule
from vmsched_domain.usage import MeasuredUsage
from vmsched_placement import (
    DecisionContext,
    Demand,
    Fleet,
    HostState,
    PlacementRequest,
    SelectorTerm,
    Taint,
    Toleration,
    Weights,
)
from vmsched_placement.model import NO_DEMAND, PlacementGroup, extras_of

NOW = 1_000_000.0
TIMEOUT = 15.0


def host(
    host_id: str = "hv-01",
    *,
    cpu: int = 16,
    memory_mb: int = 32768,
    disk_gb: int = 500,
    gpu: int = 0,
    used_cpu: int = 0,
    used_memory_mb: int = 0,
    used_disk_gb: int = 0,
    used_gpu: int = 0,
    status: str = "online",
    labels: Mapping[str, str] | None = None,
    vm_count: int = 0,
    paused: bool = False,
    heartbeat_age: float = 1.0,
    cpu_ratio: float = 1.0,
    memory_ratio: float = 1.0,
    disk_ratio: float = 1.0,
    reserved: Demand = NO_DEMAND,
    usage: MeasuredUsage | None = None,
    taints: Sequence[Taint] = (),
    extra: Mapping[str, int] | None = None,
    used_extra: Mapping[str, int] | None = None,
    networks: Sequence[str] = (),
    dedicated_to: str | None = None,
) -> HostState:
    return HostState(
        id=host_id,
        status=status,
        labels=dict(labels or {}),
        capacity=Demand(cpu, memory_mb, disk_gb, gpu, extras_of(extra or {})),
        allocated=Demand(used_cpu, used_memory_mb, used_disk_gb, used_gpu, extras_of(used_extra or {})),
        vm_count=vm_count,
        scheduling_paused=paused,
        last_heartbeat=NOW - heartbeat_age,
        cpu_ratio=cpu_ratio,
        memory_ratio=memory_ratio,
        disk_ratio=disk_ratio,
        reserved=reserved,
        usage=usage,
        taints=tuple(taints),
        networks=frozenset(networks),
        dedicated_to=dedicated_to,
    )


def request(
    *,
    cpu: int = 1,
    memory_mb: int = 1024,
    disk_gb: int = 10,
    gpu: int = 0,
    labels: Mapping[str, str] | None = None,
    strategy: Strategy = Strategy.LEAST_LOADED,
    exclude: Sequence[str] = (),
    name: str = "web-1",
    host_selector: Sequence[SelectorTerm] = (),
    tolerations: Sequence[Toleration] = (),
    in_group: PlacementGroup | None = None,
    extra: Mapping[str, int] | None = None,
    networks: Sequence[str] = (),
    project: str = "default",
    dedicated: bool = False,
    planner: Planner = Planner.FLAT,
) -> PlacementRequest:
    return PlacementRequest(
        vm_id="00000000-0000-0000-0000-000000000001",
        name=name,
        demand=Demand(cpu, memory_mb, disk_gb, gpu, extras_of(extra or {})),
        labels=dict(labels or {}),
        strategy=strategy,
        exclude_hosts=frozenset(exclude),
        host_selector=tuple(host_selector),
        tolerations=tuple(tolerations),
        group=in_group,
        networks=frozenset(networks),
        project=project,
        dedicated=dedicated,
        planner=planner,
    )


def term(key: str, operator: str, *values: str) -> SelectorTerm:
    """``term("zone", "In", "z1", "z2")``: a host selector term as a user writes it."""
    return SelectorTerm(key, SelectorOperator(operator), values)


GROUP_ID = UUID("00000000-0000-0000-0000-0000000000a1")


def group(
    policy: GroupPolicy,
    members: Mapping[str, int] | None = None,
    *,
    key: str = HOST_TOPOLOGY,
    max_per_domain: int = 1,
    max_skew: int = 1,
) -> PlacementGroup:
    """A server group with ``members`` per domain."""
    rule = GroupRule(GROUP_ID, policy, key, max_per_domain, max_skew)
    return PlacementGroup(rule, dict(members or {}))


def context(*, cursor: int = 0, seed: int = 0, weights: Weights | None = None, now: float = NOW) -> DecisionContext:
    return DecisionContext(
        now=now,
        offline_timeout=TIMEOUT,
        weights=weights or Weights(),
        rng=random.Random(seed),
        round_robin_cursor=cursor,
    )


def fleet_of(*hosts: HostState) -> Fleet:
    return Fleet.from_hosts(hosts)


# ---- the reference: one host at a time, in plain Python ------------------------------------


def reference_effective(h: HostState) -> tuple[int, int, int, int]:
    """What VMs may have of each resource: (capacity - reserved) x ratio, rounded down; GPUs as they are."""
    return (
        math.floor((h.capacity.cpu - h.reserved.cpu) * h.cpu_ratio + 1e-9),
        math.floor((h.capacity.memory_mb - h.reserved.memory_mb) * h.memory_ratio + 1e-9),
        math.floor((h.capacity.disk_gb - h.reserved.disk_gb) * h.disk_ratio + 1e-9),
        h.capacity.gpu - h.reserved.gpu,
    )


def reference_first_failure(h: HostState, req: PlacementRequest, ctx: DecisionContext) -> str | None:
    """The name of the first filter ``h`` fails, or None when it passes them all."""
    if h.id in req.exclude_hosts:
        return "excluded"
    if h.status != "online" or ctx.now - h.last_heartbeat > ctx.offline_timeout:
        return "offline"
    if h.scheduling_paused:
        return "paused"
    if (h.dedicated_to is None and req.dedicated) or (h.dedicated_to is not None and h.dedicated_to != req.project):
        return "dedicated"
    if any(h.labels.get(key) != value for key, value in req.labels.items()):
        return "labels"
    if not all(reference_term_holds(t, h.labels) for t in req.host_selector):
        return "host_selector"
    if any(t.effect == "NoSchedule" and not reference_tolerated(t, req) for t in h.taints):
        return "taints"
    if any(network not in h.networks for network in req.networks):
        return "network"
    effective = reference_effective(h)
    allocated = h.allocated.as_tuple()
    demand = req.demand.as_tuple()
    for position, name in enumerate(("cpu", "memory", "disk", "gpu")):
        if demand[position] > 0 and effective[position] - allocated[position] < demand[position]:
            return name
    has, used = dict(h.capacity.extra), dict(h.allocated.extra)
    if any(count > 0 and has.get(name, 0) - used.get(name, 0) < count for name, count in req.demand.extra):
        return "extra"
    return None


def reference_term_holds(t: SelectorTerm, labels: Mapping[str, str]) -> bool:
    """Kubernetes' match expressions, one host at a time."""
    if t.operator == "In":
        return t.key in labels and labels[t.key] in t.values
    if t.operator == "NotIn":
        return t.key not in labels or labels[t.key] not in t.values
    if t.operator == "Exists":
        return t.key in labels
    assert t.operator == "DoesNotExist"
    return t.key not in labels


def reference_tolerated(taint: Taint, req: PlacementRequest) -> bool:
    """Kubernetes' rule, spelled out: some toleration whose effect is empty or the taint's, whose key
    is empty (only with Exists) or the taint's, and which is Exists or has the taint's value."""
    for toleration in req.tolerations:
        effect_matches = toleration.effect is None or toleration.effect == taint.effect
        key_matches = toleration.key == "" or toleration.key == taint.key
        value_matches = toleration.operator == "Exists" or toleration.value == taint.value
        if effect_matches and key_matches and value_matches:
            return True
    return False


def reference_penalty(h: HostState, req: PlacementRequest) -> int:
    """How many soft rules would rather not use ``h``: an untolerated PreferNoSchedule taint, and GPUs
    (to give) for a VM that asks for none."""
    prefer = any(t.effect == "PreferNoSchedule" and not reference_tolerated(t, req) for t in h.taints)
    gpus = req.demand.gpu == 0 and reference_effective(h)[3] > 0
    return int(prefer) + int(gpus)


def reference_preferred(hosts: Sequence[HostState], req: PlacementRequest, ctx: DecisionContext) -> list[HostState]:
    """The eligible hosts no soft rule penalises more than the least penalised one, in id order."""
    eligible = reference_eligible(hosts, req, ctx)
    if not eligible:
        return []
    lowest = min(reference_penalty(h, req) for h in eligible)
    return [h for h in eligible if reference_penalty(h, req) == lowest]


FILTER_ORDER = (
    "excluded",
    "offline",
    "paused",
    "dedicated",
    "labels",
    "host_selector",
    "taints",
    "network",
    "server_group",
    "cpu",
    "memory",
    "disk",
    "gpu",
    "extra",
    "spread",
)


def reference_reason(rejections: Mapping[str | None, int], online: bool) -> str:
    """An unschedulable VM's reason: no_available_agents with no online host, else the last filter
    (in order) that rejected a host."""
    if not online:
        return "no_available_agents"
    return [name for name in FILTER_ORDER if rejections.get(name)][-1]


def reference_online(h: HostState, ctx: DecisionContext) -> bool:
    return h.status == "online" and ctx.now - h.last_heartbeat <= ctx.offline_timeout


def reference_least_loaded(h: HostState, weights: Weights) -> float:
    effective = reference_effective(h)
    shares = [float(used) / float(max(total, 1)) for used, total in zip(h.allocated.as_tuple(), effective, strict=True)]
    return weights.cpu * shares[0] + weights.memory * shares[1] + weights.disk * shares[2]


def reference_least_utilized(h: HostState, weights: Weights) -> float:
    """Measured cpu and memory (plus what was allocated since the measurement) of the physical
    capacity, and allocated disk; a host without usage is scored as ``least_loaded`` scores it."""
    if h.usage is None:
        return reference_least_loaded(h, weights)
    cpu = h.usage.cpu_used + max(0, h.allocated.cpu - h.usage.allocated_cpu)
    memory = h.usage.memory_used_mb + max(0, h.allocated.memory_mb - h.usage.allocated_memory_mb)
    disk = float(h.allocated.disk_gb) / float(max(reference_effective(h)[2], 1))
    return (
        weights.cpu * (cpu / float(max(h.capacity.cpu, 1)))
        + weights.memory * (memory / float(max(h.capacity.memory_mb, 1)))
        + weights.disk * disk
    )


def reference_best_fit(h: HostState, req: PlacementRequest, weights: Weights) -> float:
    effective = reference_effective(h)
    left = [
        float(total - used - need) / float(max(total, 1))
        for total, used, need in zip(effective, h.allocated.as_tuple(), req.demand.as_tuple(), strict=True)
    ]
    return weights.cpu * left[0] + weights.memory * left[1] + weights.disk * left[2]


def reference_eligible(hosts: Sequence[HostState], req: PlacementRequest, ctx: DecisionContext) -> list[HostState]:
    """Eligible hosts in id order (the last state wins for a repeated id, as in the fleet)."""
    by_id = {h.id: h for h in hosts}
    return [by_id[i] for i in sorted(by_id) if reference_first_failure(by_id[i], req, ctx) is None]


# ---- hypothesis strategies -----------------------------------------------------------------

HOST_IDS = [f"hv-{n:02d}" for n in range(24)]
LABEL_KEYS = ["zone", "rack", "gpu"]
LABEL_VALUES = ["a", "b", "c"]

label_maps = st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=3)
EXTRA_NAMES = ["fpga", "nic"]
# Most hosts and VMs have no extras; some have one or both names, in small counts.
extra_maps = st.one_of(
    st.just(()),
    st.just(()),
    st.dictionaries(st.sampled_from(EXTRA_NAMES), st.integers(0, 3), max_size=2).map(extras_of),
)

TAINT_KEYS = ["gpu", "dedicated", "spot"]
EFFECTS = ["NoSchedule", "PreferNoSchedule"]
taints = st.builds(Taint, st.sampled_from(TAINT_KEYS), st.sampled_from(["", "true", "ml"]), st.sampled_from(EFFECTS))
# Most hosts have no taints.
taint_lists = st.one_of(st.just(()), st.just(()), st.lists(taints, max_size=3).map(tuple))

# The projects VMs belong to and hosts are dedicated to.
PROJECTS = ["p1", "p2"]
# The networks a host reaches or a VM needs: none, a few of a small set, all of it.
NETWORKS = ("vlan-100", "vlan-200", "storage")
network_sets = st.sets(st.sampled_from(NETWORKS), max_size=len(NETWORKS)).map(frozenset)
tolerations = st.one_of(
    st.builds(
        Toleration,
        key=st.sampled_from(TAINT_KEYS),
        operator=st.just("Equal"),
        value=st.sampled_from(["", "true", "ml"]),
        effect=st.sampled_from([None, *EFFECTS]),
    ),
    st.builds(
        Toleration,
        key=st.sampled_from(["", *TAINT_KEYS]),
        operator=st.just("Exists"),
        value=st.just(""),
        effect=st.sampled_from([None, *EFFECTS]),
    ),
)
toleration_lists = st.one_of(st.just(()), st.just(()), st.lists(tolerations, max_size=2).map(tuple))


@st.composite
def host_states(draw: st.DrawFn, host_id: str | None = None) -> HostState:
    """Mostly healthy hosts with room, and every way of failing now and then (including the edges)."""
    cpu = draw(st.integers(0, 16))
    memory_mb = draw(st.sampled_from([0, 1024, 2048, 4096, 8192, 3000]))
    disk_gb = draw(st.integers(0, 200))
    gpu = draw(st.sampled_from([0, 0, 1, 2]))
    cpu_ratio = draw(st.sampled_from([1.0, 1.0, 1.5, 2.0, 0.7, 1.1]))
    memory_ratio = draw(st.sampled_from([1.0, 1.0, 1.5, 0.9]))
    disk_ratio = draw(st.sampled_from([1.0, 1.0, 1.0, 1.2]))
    reserved = draw(
        st.sampled_from([Demand(0, 0, 0, 0)] * 3 + [Demand(1, 512, 10, 0), Demand(2, 1024, 0, 1), Demand(0, 0, 300, 0)])
    )
    # How full the host is, from empty to a little over its effective capacity (a ratio lowered
    # under a full host); resources fill together, with a nudge each.
    fill = draw(st.sampled_from([0.0, 0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 0.9, 1.0]))
    effective = (
        max(0, math.floor((cpu - reserved.cpu) * cpu_ratio + 1e-9)),
        max(0, math.floor((memory_mb - reserved.memory_mb) * memory_ratio + 1e-9)),
        max(0, math.floor((disk_gb - reserved.disk_gb) * disk_ratio + 1e-9)),
        max(0, gpu - reserved.gpu),
    )
    used_cpu, used_memory, used_disk, used_gpu = (
        max(0, math.floor(total * fill) + draw(st.sampled_from([0, 0, 0, -1, 1]))) for total in effective
    )
    extra = draw(extra_maps)
    used_extra = {name: max(0, math.floor(count * fill) + draw(st.sampled_from([0, 0, 1]))) for name, count in extra}
    return HostState(
        id=host_id if host_id is not None else draw(st.sampled_from(HOST_IDS)),
        status=draw(st.sampled_from(["online"] * 6 + ["draining", "offline"])),
        labels=draw(label_maps),
        capacity=Demand(cpu, memory_mb, disk_gb, gpu, extra),
        allocated=Demand(used_cpu, used_memory, used_disk, used_gpu, extras_of(used_extra)),
        vm_count=draw(st.integers(0, 20)),
        scheduling_paused=draw(st.sampled_from([False] * 7 + [True])),
        last_heartbeat=NOW - draw(st.sampled_from([0.0, 1.0, 1.0, 2.5, 14.9, TIMEOUT, 15.1, 60.0])),
        cpu_ratio=cpu_ratio,
        memory_ratio=memory_ratio,
        disk_ratio=disk_ratio,
        reserved=reserved,
        usage=draw(host_usages(used_cpu, used_memory)),
        taints=draw(taint_lists),
        networks=draw(network_sets),
        dedicated_to=draw(st.sampled_from([None] * 5 + PROJECTS)),
    )


@st.composite
def host_usages(draw: st.DrawFn, allocated_cpu: int, allocated_memory_mb: int) -> MeasuredUsage | None:
    """None (an agent that measures nothing) now and then, else a measurement below, at or above
    the allocation, taken before some of it was allocated (or before some was released)."""
    if draw(st.sampled_from([True, False, False])):
        return None
    return MeasuredUsage(
        cpu_used=draw(st.sampled_from([0.0, 0.5, 1.0, 2.25, 7.0, 12.5, 40.0])),
        memory_used_mb=float(draw(st.sampled_from([0, 512, 1000, 4096, 9000]))),
        allocated_cpu=max(0, allocated_cpu + draw(st.sampled_from([0, 0, -1, -4, 2]))),
        allocated_memory_mb=max(0, allocated_memory_mb + draw(st.sampled_from([0, 0, -1024, 512]))),
    )


@st.composite
def healthy_host_states(draw: st.DrawFn) -> HostState:
    """Hosts that pass everything but (sometimes) the request's own needs: capacity and labels."""
    base = draw(host_states())
    fill = draw(st.sampled_from([0.0, 0.25, 0.5, 0.6]))
    capacity = Demand(
        draw(st.integers(4, 32)),
        draw(st.sampled_from([4096, 8192, 16384])),
        200,
        draw(st.integers(0, 2)),
        draw(extra_maps),
    )
    return replace(
        base,
        status="online",
        last_heartbeat=NOW - draw(st.sampled_from([0.0, 2.5, TIMEOUT])),
        scheduling_paused=False,
        labels={key: draw(st.sampled_from(LABEL_VALUES)) for key in LABEL_KEYS},
        capacity=capacity,
        reserved=Demand(0, 0, 0, 0),
        disk_ratio=1.0,
        allocated=Demand(
            math.floor(capacity.cpu * fill),
            math.floor(capacity.memory_mb * fill),
            math.floor(capacity.disk_gb * fill),
            math.floor(capacity.gpu * fill),
            extras_of({name: math.floor(count * fill) for name, count in capacity.extra}),
        ),
    )


# A mix of healthy hosts and hosts of any kind, so decisions both succeed and fail for every reason.
host_lists = st.lists(st.one_of(healthy_host_states(), host_states()), max_size=20)


@st.composite
def selector_terms(draw: st.DrawFn) -> SelectorTerm:
    """Any operator on a known key (or one no host has), values known and unknown ("d")."""
    operator = draw(st.sampled_from(list(SelectorOperator)))
    values: tuple[str, ...] = ()
    if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN):
        values = tuple(draw(st.lists(st.sampled_from([*LABEL_VALUES, "d"]), min_size=1, max_size=6)))
    return SelectorTerm(draw(st.sampled_from([*LABEL_KEYS, "ssd"])), operator, values)


host_selectors = st.lists(selector_terms(), max_size=3).map(tuple)


@st.composite
def placement_requests(draw: st.DrawFn, strategy: Strategy | None = None) -> PlacementRequest:
    """Mostly modest requests; labels, host selectors, GPUs and exclusions now and then."""
    labels = draw(
        st.one_of(
            st.just({}),
            st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2),
        )
    )
    return PlacementRequest(
        vm_id="vm",
        name="vm",
        demand=Demand(
            draw(st.integers(0, 6)),
            draw(st.sampled_from([0, 512, 1024, 2048])),
            draw(st.integers(0, 60)),
            draw(st.sampled_from([0, 0, 0, 1])),
            draw(extra_maps),
        ),
        labels=labels,
        strategy=strategy if strategy is not None else draw(st.sampled_from(list(Strategy))),
        exclude_hosts=frozenset(draw(st.lists(st.sampled_from(HOST_IDS), max_size=2))),
        host_selector=draw(st.one_of(st.just(()), host_selectors)),
        tolerations=draw(toleration_lists),
        networks=draw(st.one_of(st.just(frozenset[str]()), network_sets)),
        project_pods=draw(st.one_of(st.just({}), st.dictionaries(st.sampled_from(LABEL_VALUES), st.integers(0, 5)))),
        project=draw(st.sampled_from(PROJECTS)),
        dedicated=draw(st.sampled_from([False] * 4 + [True])),
    )


weight_sets = st.builds(
    Weights,
    cpu=st.sampled_from([0.0, 0.4, 1.0, 0.3]),
    memory=st.sampled_from([0.0, 0.4, 0.5]),
    disk=st.sampled_from([0.0, 0.2, 1.0]),
)


@st.composite
def contexts(draw: st.DrawFn) -> DecisionContext:
    return DecisionContext(
        now=NOW,
        offline_timeout=TIMEOUT,
        weights=draw(weight_sets),
        rng=random.Random(draw(st.integers(0, 2**32))),
        round_robin_cursor=draw(st.integers(0, 10_000)),
    )
