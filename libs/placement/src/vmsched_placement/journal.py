"""The decision journal: the exact inputs of every decision, kept cheaply enough to keep them all.

A decision reads the fleet (every host's :class:`HostState`), the request and the context (the
instant, the settings, the round-robin cursor, the randomness). Storing the fleet with every decision
would cost a host's row times the fleet's size; instead each scheduler replica writes a chain of
entries: a *checkpoint* (every host whole, and the replica's settings) every
:data:`CHECKPOINT_EVERY` entries or the fleet's size if larger, and between two, per decision, only
the fields of the hosts that changed since the replica's previous decision (its own bookings, the
other replicas' claims it has read, heartbeats), with the request, the instant, the cursor and the
seed. A decision's inputs are its checkpoint with the entries after it applied in order
(:func:`rebuild`), so a replay decides on the very fleet the replica decided on, the bookings of
the round's earlier VMs included, as far as the decision reads it: a host's heartbeat instant is kept
only as the offline verdict needs it, and its measured usage only for the decisions whose strategy
reads usage (:class:`Journal`); every host, request and score of the decision as made is the same.

A preemption's entry also holds what its choice read beside the fleet (:class:`PreemptionInputs`):
the preemptor's priority and the lower-priority residents of the hosts whose victims cost least
(the others cannot win, whatever their residents), so a replay chooses the same host and victims.

Entries are pruned by age (``VMSCHED_JOURNAL_RETENTION``) a checkpoint at a time: everything before
a checkpoint written before the cutoff was noted before it, so nothing a later decision needs goes.
A replica idle for half the retention starts again at a checkpoint (``checkpoint_age``), so that
a chain whose every entry is past the cutoff can go whole without leaving a live replica's next
delta without its checkpoint.

Pure: the scheduler feeds :class:`Journal` and stores what it returns; the API rebuilds and decides.
An entry is JSON compressed with zlib (:func:`pack`).
"""

from __future__ import annotations

import json
import math
import random
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any
from uuid import UUID

import numpy as np

from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import SelectorOperator
from vmsched_contract.planner import Planner
from vmsched_contract.strategy import Strategy
from vmsched_domain.groups import GroupRule
from vmsched_domain.storage import PoolRoom, VolumeAsk
from vmsched_domain.usage import MeasuredUsage
from vmsched_placement.fleet import Fleet, FleetColumns, FloatArray
from vmsched_placement.model import (
    DecisionContext,
    Demand,
    FailoverReserve,
    HostState,
    Migration,
    PlacementGroup,
    PlacementRequest,
    SelectorTerm,
    Weights,
)
from vmsched_placement.preemption import Resident, Victims, drawn, preemptible_rows
from vmsched_placement.strategies import reads_measured_usage
from vmsched_placement.taint_rules import Taint, Toleration

# Entries between two checkpoints, at least (and at least the fleet's size): a replay applies at most
# that many deltas; a checkpoint costs the whole fleet once, shared by that many decisions.
CHECKPOINT_EVERY = 512

_HOST_FIELDS = tuple(f.name for f in fields(HostState))
_HEARTBEAT = _HOST_FIELDS.index("last_heartbeat")
_USAGE = _HOST_FIELDS.index("usage")
# Host fields held as sets (written as sorted lists).
_SET_FIELDS = frozenset({"networks"})

Json = Any


# -- codec: each engine type as compact JSON, and back ----------------------------------------------
def _demand(d: Demand) -> Json:
    return [d.cpu, d.memory_mb, d.disk_gb, d.gpu, [list(e) for e in d.extra]]


def _to_demand(v: Json) -> Demand:
    return Demand(v[0], v[1], v[2], v[3], tuple((str(n), int(a)) for n, a in v[4]))


def _host_value(name: str, value: Any) -> Json:
    if isinstance(value, Demand):
        return _demand(value)
    if isinstance(value, MeasuredUsage):
        return [value.cpu_used, value.memory_used_mb, value.allocated_cpu, value.allocated_memory_mb]
    if name == "taints":
        return [[t.key, t.value, t.effect] for t in value]
    if name == "labels":
        return dict(value)
    if isinstance(value, frozenset):
        return sorted(value)
    if name == "storage_pools":
        return [_pool(p) for p in value]
    return value


def _pool(p: PoolRoom) -> Json:
    return [p.name, p.shared, p.capacity_gb, p.allocated_gb, sorted(p.tags)]


def _to_pool(v: Json) -> PoolRoom:
    return PoolRoom(str(v[0]), bool(v[1]), int(v[2]), int(v[3]), frozenset(v[4]))


def _to_host_value(name: str, v: Json) -> Any:
    if name in ("capacity", "allocated", "reserved"):
        return _to_demand(v)
    if name == "usage":
        return None if v is None else MeasuredUsage(v[0], v[1], v[2], v[3])
    if name == "taints":
        return tuple(Taint(k, val, e) for k, val, e in v)
    if name in _SET_FIELDS:
        return frozenset(v)
    if name == "storage_pools":
        return tuple(_to_pool(p) for p in v)
    return v


def encode_host(host: HostState) -> list[Json]:
    """Every field the engine reads, in :class:`HostState`'s order."""
    return [_host_value(name, getattr(host, name)) for name in _HOST_FIELDS]


def decode_host(row: Sequence[Json], now: float) -> HostState:
    """The host of a journal row, as the decision at ``now`` read it (a heartbeat kept as fresh,
    ``null``, is rebuilt as ``now``). A row written before a field was added to :class:`HostState`
    (added last) is shorter: the missing fields take their defaults, which is what the engine read then."""
    values = {name: _to_host_value(name, v) for name, v in zip(_HOST_FIELDS, row, strict=False)}
    if values["last_heartbeat"] is None:
        values["last_heartbeat"] = now
    return HostState(**values)


def encode_request(r: PlacementRequest) -> Json:
    """The request less its VM's id and name (the record's VM gives them back)."""
    group: list[Json] | None = None
    if r.group is not None:
        rule = r.group.rule
        members = dict(r.group.members)
        group = [str(rule.id), rule.policy.value, rule.topology_key, rule.max_per_domain, rule.max_skew, members]
    return {
        "d": _demand(r.demand),
        "l": dict(r.labels),
        "s": r.strategy.value,
        "x": sorted(r.exclude_hosts),
        "h": [[t.key, t.operator.value, list(t.values)] for t in r.host_selector],
        "t": [[t.key, t.operator, t.value, t.effect] for t in r.tolerations],
        "g": group,
        "m": None if r.migration is None else [r.migration.source, r.migration.target_host],
        "n": sorted(r.networks),
        "u": dict(r.project_pods),
        "pj": r.project,
        "dd": r.dedicated,
        "pl": r.planner.value,
        "xc": r.exclude_cluster_after,
        "r": None
        if r.reserve is None
        else [r.reserve.reserve_hosts, {z: list(a) for z, a in r.reserve.headroom.items()}],
        "v": [[v.size_gb, sorted(v.tags), v.stays_on] for v in r.volumes],
    }


def decode_request(v: Json, vm_id: str, name: str) -> PlacementRequest:
    group = None
    if v["g"] is not None:
        gid, policy, key, per_domain, skew, members = v["g"]
        group = PlacementGroup(GroupRule(UUID(gid), GroupPolicy(policy), key, per_domain, skew), dict(members))
    return PlacementRequest(
        vm_id=vm_id,
        name=name,
        demand=_to_demand(v["d"]),
        labels=dict(v["l"]),
        strategy=Strategy(v["s"]),
        exclude_hosts=frozenset(v["x"]),
        host_selector=tuple(SelectorTerm(k, SelectorOperator(op), tuple(vals)) for k, op, vals in v["h"]),
        tolerations=tuple(Toleration(k, op, val, e) for k, op, val, e in v["t"]),
        group=group,
        migration=None if v["m"] is None else Migration(v["m"][0], v["m"][1]),
        networks=frozenset(v.get("n", ())),  # absent from entries written before networks
        project_pods=dict(v.get("u", {})),  # absent from entries written before user_concentrated
        project=str(v.get("pj", "")),  # these two absent from entries written before dedicated hosts
        dedicated=bool(v.get("dd", False)),
        planner=Planner(v.get("pl", Planner.FLAT.value)),  # these two absent before the hierarchy
        exclude_cluster_after=int(v.get("xc", 0)),
        reserve=_to_reserve(v.get("r")),
        volumes=tuple(VolumeAsk(int(size), frozenset(tags), stays) for size, tags, stays in v.get("v", ())),
    )


def _to_reserve(v: Json) -> FailoverReserve | None:
    if v is None:
        return None
    reserve_hosts, headroom = v
    return FailoverReserve(int(reserve_hosts), {zone: (a[0], a[1], a[2], a[3]) for zone, a in headroom.items()})


@dataclass(frozen=True, slots=True)
class PreemptionInputs:
    """What a preemption's choice read beside the fleet: the preemptor's priority, and the residents
    (lower priority) of the hosts its choice was drawn among."""

    priority: int
    residents: Mapping[str, Sequence[Resident]]


def encode_preemption(p: PreemptionInputs) -> Json:
    return [p.priority, {h: [[r.vm_id, r.priority, _demand(r.demand)] for r in vms] for h, vms in p.residents.items()}]


def decode_preemption(v: Json) -> PreemptionInputs:
    priority, residents = v
    return PreemptionInputs(
        priority,
        {h: [Resident(str(vm_id), int(p), _to_demand(d)) for vm_id, p, d in vms] for h, vms in residents.items()},
    )


def pack(entry: Mapping[str, Json]) -> bytes:
    return zlib.compress(json.dumps(entry, separators=(",", ":")).encode(), 6)


def unpack(body: bytes) -> dict[str, Json]:
    loaded: dict[str, Json] = json.loads(zlib.decompress(body))
    return loaded


# -- writing ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Entry:
    """One decision's entry: its number in the replica's chain, and the packed body."""

    seq: int
    checkpoint: bool
    body: bytes


class Journal:
    """One replica's chain. :meth:`note` is called with the fleet as the engine is about to read it
    (the round's earlier bookings on it). The fleet's columns keep the ids of the hosts written since
    the last entry (:attr:`FleetColumns.touched`), so an entry costs the hosts that changed, not the
    fleet; only a new copy of the fleet (a full read) is compared host by host, by reference first
    (host values are replaced on every change), then field by field for those replaced.

    Two fields move with every heartbeat without changing most decisions; they are kept as far as
    the decisions read them (docs/placement.md, "Replay"):

    - ``last_heartbeat`` is read only through the offline verdict at the decision's instant
      (``now - last_heartbeat <= offline_timeout``). The journal keeps ``null`` for a host whose
      heartbeat is fresh (rebuilt as the decision's instant, age 0) and the real instant for a stale
      one, and writes a host's again only when the kept value would give another verdict than the
      real one at this decision's instant: every host is checked at every entry, in one vectorised
      comparison, so a replay sees every host online or offline as the decision did.
    - ``usage`` (measured) is read only by strategies with ``READS_MEASURED_USAGE``: a host's new
      usage is written with the next entry of such a decision (or the next checkpoint), and waits
      till then; the other decisions' replays rank exactly as made, whatever usage they rebuild.
    """

    def __init__(
        self,
        weights: Weights,
        offline_timeout: float,
        *,
        checkpoint_every: int = CHECKPOINT_EVERY,
        at_least_fleet: bool = True,
        checkpoint_age: float | None = None,
    ) -> None:
        self._settings = [weights.cpu, weights.memory, weights.disk, offline_timeout]
        self._offline_timeout = offline_timeout  # what a replay judges the kept heartbeats by
        self._every = checkpoint_every
        self._at_least_fleet = at_least_fleet  # tests turn it off to checkpoint often on small fleets
        self._seq = 0
        self._since_checkpoint = 0
        self._must_checkpoint = True  # the first entry is a checkpoint
        # A checkpoint at least this often (seconds of the decisions' instants) while entries come:
        # pruning may drop a chain whose checkpoint is older than the retention, whole.
        self._checkpoint_age = checkpoint_age
        self._checkpoint_at = 0.0
        # Per host: its value when last looked at, and its row as the chain holds it.
        self._seen: dict[str, tuple[HostState, list[Json]]] = {}
        self._columns: FleetColumns | None = None  # the fleet's columns at the last entry
        # The kept heartbeats (inf: fresh), in the row order of ``_columns``; None: to be realigned.
        self._beats: FloatArray | None = None
        self._usage_behind: set[str] = set()  # hosts whose kept usage is older than their real one

    def restart(self) -> None:
        """The chain's last entries were lost (their write failed): the next entry is a checkpoint."""
        self._must_checkpoint = True

    def note(
        self,
        fleet: Fleet,
        request: PlacementRequest,
        context: DecisionContext,
        seed: int | None,
        preemption: PreemptionInputs | None = None,
    ) -> Entry:
        """The entry of one decision (``preemption``: one preemption's choice) on ``fleet``."""
        self._seq += 1
        # At least one host's worth of decisions between checkpoints: a checkpoint then costs each
        # decision about one host's row, whatever the fleet's size.
        checkpoint = (
            self._must_checkpoint
            or self._since_checkpoint >= max(self._every, len(fleet) if self._at_least_fleet else 0)
            or (self._checkpoint_age is not None and context.now - self._checkpoint_at >= self._checkpoint_age)
        )
        self._must_checkpoint = False
        if checkpoint:
            self._checkpoint_at = context.now
        self._since_checkpoint = 1 if checkpoint else self._since_checkpoint + 1
        seen = self._seen
        columns = fleet.columns
        reads_usage = checkpoint or reads_measured_usage(request.strategy)
        if checkpoint or columns is not self._columns:
            # Another copy of the fleet (a full read replaced it): every host compared once.
            candidates: list[str] = list(columns.ids)
            gone = sorted(set(seen) - set(columns.ids))
            self._beats = None
        else:
            touched = columns.touched | self._usage_behind if reads_usage else columns.touched
            candidates = sorted(touched)
            gone = [host_id for host_id in candidates if host_id in seen and fleet.host(host_id) is None]
        columns.touched = set()
        self._columns = columns
        behind = self._usage_behind
        for host_id in gone:
            del seen[host_id]
            behind.discard(host_id)
            self._beats = None
        before = self._host_rows(fleet, candidates, context, reads_usage)
        self._heartbeat_verdicts(columns, context, before)
        hosts: dict[str, Json] = {}
        if checkpoint:
            hosts = {host_id: seen[host_id][1] for host_id in columns.ids}
        else:
            for host_id, old in before.items():
                row = seen[host_id][1]
                if old is None:
                    hosts[host_id] = row
                elif row != old:
                    hosts[host_id] = {str(i): v for i, (v, was) in enumerate(zip(row, old, strict=True)) if v != was}
        entry: dict[str, Json] = {
            "h": hosts,
            "r": encode_request(request),
            "n": context.now,
            "c": context.round_robin_cursor,
            "s": seed,
        }
        if gone and not checkpoint:
            entry["x"] = gone
        if preemption is not None:
            entry["p"] = encode_preemption(preemption)
        if request.volumes:
            # The shared pools a decision with volumes read, beside the hosts (counted once for them all).
            entry["sp"] = [_pool(pool) for pool in columns.storage.shared.values()]
        if checkpoint:
            entry["k"] = self._settings
        return Entry(self._seq, checkpoint, pack(entry))

    def _host_rows(
        self, fleet: Fleet, candidates: Iterable[str], context: DecisionContext, reads_usage: bool
    ) -> dict[str, list[Json] | None]:
        """Bring the kept rows of ``candidates`` up to date (heartbeats as they were kept, usage only
        when ``reads_usage``); the rows written, each with its previous row (None: a new host)."""
        seen, behind = self._seen, self._usage_behind
        before: dict[str, list[Json] | None] = {}
        for host_id in candidates:
            host = fleet.host(host_id)
            if host is None:
                continue
            known = seen.get(host_id)
            # Unchanged: the same value, or (after a full read) an equal one; its row is reused.
            if known is not None and (known[0] is host or known[0] == host) and not (reads_usage and host_id in behind):
                seen[host_id] = (host, known[1])
                continue
            row = encode_host(host)
            if known is None:
                row[_HEARTBEAT] = None if self._fresh(context, host.last_heartbeat) else host.last_heartbeat
                self._beats = None
            else:
                row[_HEARTBEAT] = known[1][_HEARTBEAT]  # kept unless its verdict differs (_heartbeat_verdicts)
                if not reads_usage and row[_USAGE] != known[1][_USAGE]:
                    row[_USAGE] = known[1][_USAGE]
                    behind.add(host_id)
            if reads_usage:
                behind.discard(host_id)
            if known is None or row != known[1]:
                before[host_id] = None if known is None else known[1]
            seen[host_id] = (host, row)
        return before

    def _fresh(self, context: DecisionContext, heartbeat: float) -> bool:
        """The offline filter's heartbeat verdict, by the same arithmetic (filters/offline.py)."""
        return bool(context.now - heartbeat <= context.offline_timeout)

    def _heartbeat_verdicts(
        self, columns: FleetColumns, context: DecisionContext, before: dict[str, list[Json] | None]
    ) -> None:
        """Write the heartbeat of every host whose kept one gives another verdict at this decision's
        instant than its real one: ``null`` (fresh) or its real, stale, instant."""
        seen = self._seen
        beats = self._beats
        if beats is None or len(beats) != len(columns.ids):
            beats = np.fromiter(
                (_kept_beat(seen[host_id][1][_HEARTBEAT]) for host_id in columns.ids), np.float64, len(columns.ids)
            )
            self._beats = beats
        # The engine's verdict (its timeout) against the replay's (the chain's timeout, as rebuilt).
        fresh = np.subtract(context.now, columns.last_heartbeat) <= context.offline_timeout
        kept = np.subtract(context.now, beats) <= self._offline_timeout
        for index in np.flatnonzero(fresh != kept).tolist():
            host_id = columns.ids[index]
            host, row = seen[host_id]
            value = None if fresh[index] else float(columns.last_heartbeat[index])
            beats[index] = _kept_beat(value)
            before.setdefault(host_id, row)
            row = list(row)
            row[_HEARTBEAT] = value
            seen[host_id] = (host, row)


def _kept_beat(value: float | None) -> float:
    """A kept heartbeat as the offline verdict reads it: ``null`` is fresh at any instant."""
    return math.inf if value is None else float(value)


def seeded(context: DecisionContext, seed: int | None) -> DecisionContext:
    """The context of one decision: its own randomness from ``seed`` (strategy random), so that the
    same seed draws the same hosts again."""
    if seed is None:
        return context
    return DecisionContext(
        context.now, context.offline_timeout, context.weights, random.Random(seed), context.round_robin_cursor
    )


# -- reading ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Inputs:
    """What one decision read, rebuilt."""

    fleet: Fleet
    request: PlacementRequest
    context: DecisionContext
    seed: int | None
    preemption: PreemptionInputs | None = None  # set for a preemption's entry
    # Every host's measured usage is the one the decision saw (its strategy read it, or its entry is a
    # checkpoint); False: each host's is the last one journaled at or before it (the decision's own
    # strategy did not read usage, so its replay is exact all the same).
    usage_as_seen: bool = True

    def usage_exact_for(self, strategy: Strategy) -> bool:
        """Whether deciding again with ``strategy`` reads the measured usage the decision saw."""
        return self.usage_as_seen or not reads_measured_usage(strategy)


def rebuild(bodies: Iterable[bytes], vm_id: str, name: str) -> Inputs:
    """The inputs of the last of ``bodies``: a checkpoint's, then every later entry up to it, in order."""
    hosts: dict[str, list[Json]] = {}
    settings: list[float] | None = None
    last: dict[str, Json] = {}
    for body in bodies:
        last = unpack(body)
        if "k" in last:
            settings, hosts = last["k"], {}
        elif settings is None:
            raise ValueError("the journal's entries do not start at a checkpoint")
        for host_id, change in last["h"].items():
            if isinstance(change, list):
                hosts[host_id] = change
            else:
                row = list(hosts[host_id])
                for index, value in change.items():
                    row[int(index)] = value
                hosts[host_id] = row
        for host_id in last.get("x", ()):
            hosts.pop(host_id, None)
    if settings is None:
        raise ValueError("no journal entry")
    weights = Weights(settings[0], settings[1], settings[2])
    seed = last["s"]
    context = seeded(DecisionContext(last["n"], settings[3], weights, random.Random(0), last["c"]), seed)
    now = last["n"]
    fleet = Fleet.from_hosts(decode_host(row, now) for row in hosts.values())
    fleet.set_shared_pools({pool.name: pool for pool in map(_to_pool, last.get("sp", ()))})
    preemption = decode_preemption(last["p"]) if "p" in last else None
    request = decode_request(last["r"], vm_id, name)
    usage_as_seen = "k" in last or reads_measured_usage(request.strategy)
    return Inputs(fleet, request, context, seed, preemption, usage_as_seen)


def replay_preemption(inputs: Inputs) -> Victims | None:
    """A preemption's choice made again on its rebuilt inputs: the same hosts it could free, the
    residents it read, the same draw."""
    preemption = inputs.preemption
    if preemption is None:
        raise ValueError("not a preemption's entry")
    if inputs.seed is None:
        raise ValueError("a preemption's entry without its seed")
    fleet = inputs.fleet
    hosts = [fleet.host_at(row) for row in preemptible_rows(fleet, inputs.request, inputs.context)]
    victims, _ = drawn(hosts, inputs.request.demand, preemption.priority, preemption.residents, inputs.seed)
    return victims
