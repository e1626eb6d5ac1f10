"""The capacity snapshot in Redis: one hash per host, claims keyed by VM id, and a change feed.

Layout (``p`` is ``VMSCHED_REDIS_KEY_PREFIX``):

- ``p:host:<id>``: per resource of the fit rule its capacity (``cpu``, ``memory_mb``, ...), what is
  reserved for the hypervisor (``r_cpu``, ...), its allocation ratio where it has one
  (``cpu_ratio``, ...) and, once ``synced`` is set, what is allocated (``a_cpu``, ..., ``vm_count``);
  its named extra resources (``extra``) and what of them is allocated (``a_extra``), each a JSON
  ``{name: count}`` map (``vmsched_common.db.extra``);
  then labels, taints, status, pause flag and last heartbeat (labels, taints, ratios and reserved
  as PostgreSQL has them: the agent's overlaid by the operator's, ``vmsched_common.db.inventory``);
  for a host whose agent measures its load, the last measurement (``u_cpu``, ``u_memory_mb``) and
  what was allocated when it was folded in (``u_a_cpu``, ``u_a_memory_mb``);
- ``p:host:<id>:vms``: ids of VMs holding a claim on the host;
- ``p:claim:<vm id>``: the host and resources one VM holds (its named extras, if any, in ``extra``);
  ``p:claim:<vm id>:target``: what a
  migrating VM holds on its migration target (its *target claim*; the host's set lists it by the
  same id), which becomes ``p:claim:<vm id>`` once the migration is done (``move_claim.lua``);
- ``p:hosts``: every host id; ``p:seq`` and ``p:changed`` (host id scored by the change number
  that last touched it): a reader remembers the last number it saw and re-reads only what changed;
- ``p:rr``: the shared round-robin cursor;
- ``p:group:<id>``: a server group's members per domain (domain -> count), counted by the claim that
  checks the group's rule (atomically with capacity) and given back by the release;
  ``p:group:<id>:vms``: the VMs holding a claim counted there (a claim records its ``group`` and
  ``domain``);
- ``p:released``: claim id scored by when (Redis's clock) its claim was last given back, kept a while
  so that a reconcile that read PostgreSQL before a release does not bring the claim back.

All multi-key updates are Lua scripts (in ``lua/``), so each is atomic. The scripts name no resource:
the fit rule and the field lists are pasted into them from :mod:`vmsched_common.fit` when loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Literal
from uuid import UUID

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from vmsched_common.db.extra import extra_json, extra_of
from vmsched_common.db.inventory import labels_json, taints_json, taints_of
from vmsched_common.fit import RESOURCES, lua_shortfall_function
from vmsched_common.groups import LUA_GROUP_RULE, GroupRule
from vmsched_common.messages import HostStatus, Overcommit, Resources, Taint, Usage

# A migrating VM's claim on its target is keyed by ``<vm id>`` and this.
TARGET_CLAIM_SUFFIX = ":target"


def target_claim_id(vm_id: UUID | str) -> str:
    """The id of a migrating VM's claim on its target (its claim on its own host is its id)."""
    return f"{vm_id}{TARGET_CLAIM_SUFFIX}"


ClaimOutcome = Literal[
    "claimed", "held", "unknown_host", "offline", "paused", "insufficient", "group", "gang", "victim_moved"
]


# The hash field of a host's named extra resources (a JSON map); ``a_extra`` what is allocated of them.
EXTRA_FIELD = "extra"

# Lua helpers for those maps, pasted where a script says ``{{counts}}``.
LUA_COUNTS = """-- Named extra resources' {name: count} maps, stored as JSON (vmsched_common.db.extra).
local function decode_counts(raw)
  if not raw or raw == '' or raw == '{}' then
    return {}
  end
  return cjson.decode(raw)
end

-- JSON of the names not at 0 ('{}' for none).
local function encode_counts(counts)
  local kept, any = {}, false
  for name, n in pairs(counts) do
    if n ~= 0 then
      kept[name] = n
      any = true
    end
  end
  if not any then
    return '{}'
  end
  return cjson.encode(kept)
end

-- into + sign x counts, name by name, in place; returns into.
local function add_counts(into, counts, sign)
  for name, n in pairs(counts) do
    into[name] = (into[name] or 0) + sign * n
  end
  return into
end

local function same_counts(a, b)
  for name, n in pairs(a) do
    if (b[name] or 0) ~= n then
      return false
    end
  end
  for name, n in pairs(b) do
    if (a[name] or 0) ~= n then
      return false
    end
  end
  return true
end"""


def allocated_field(field: str) -> str:
    return f"a_{field}"


def reserved_field(field: str) -> str:
    return f"r_{field}"


@dataclass(frozen=True, slots=True)
class MeasuredUsage:
    """A host's last measured usage, and what was allocated on it when the measurement was folded in:
    what was allocated since is not in the measurement yet."""

    cpu_used: float
    memory_used_mb: int
    allocated_cpu: int
    allocated_memory_mb: int


# Per measured resource: the measurement's field, the field of the allocation at the time it was
# folded in, and the allocation field that is copied there. The measurement is a *soft* field: written
# with every heartbeat, never a reason to announce the host on the change feed (it moves all the
# time; announcing it would make every scheduler re-read every host every few seconds). Readers see it
# when they read the host for any other reason: the periodic announcement of an unchanged host
# (``bump_interval``), a claim, a release, a state change, or a full read.
USAGE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("u_cpu", "u_a_cpu", allocated_field("cpu")),
    ("u_memory_mb", "u_a_memory_mb", allocated_field("memory_mb")),
)


@dataclass(frozen=True, slots=True)
class SnapshotHost:
    """One host as the snapshot knows it."""

    id: str
    status: str
    labels: Mapping[str, str]
    capacity: Resources
    reserved: Resources
    overcommit: Overcommit
    allocated: Resources
    vm_count: int
    scheduling_paused: bool
    last_heartbeat: float
    synced: bool
    usage: MeasuredUsage | None = None
    taints: tuple[Taint, ...] = ()
    capabilities: tuple[str, ...] = ()  # what its agent declares it can do (messages.Capability)


@dataclass(frozen=True, slots=True)
class ClaimResult:
    outcome: ClaimOutcome
    detail: str

    @property
    def holds(self) -> bool:
        """The VM now holds a claim (new or from before) on host ``detail``."""
        return self.outcome in ("claimed", "held")


@dataclass(frozen=True, slots=True)
class OwnChange:
    """A host a claim changed: the change number it had before, and the one the claim gave it."""

    before: int
    seq: int


@dataclass(frozen=True, slots=True)
class Claimed:
    results: list[ClaimResult]  # one per claim, in order
    changes: dict[str, OwnChange]  # per host claimed on


@dataclass(frozen=True, slots=True)
class GroupClaim:
    """The server group a claim is a member of: its rule is checked with the capacity, against the
    group's counts in Redis; ``eligible`` are the spread's eligible domains, as the engine found them."""

    rule: GroupRule
    eligible: tuple[str, ...] = ()

    def args(self) -> list[str]:
        rule = self.rule
        return [
            str(rule.id),
            rule.reason_name,
            "1" if rule.hard else "0",
            rule.policy.value,
            rule.topology_key,
            str(rule.max_per_domain),
            str(rule.max_skew),
            str(len(self.eligible)),
            *self.eligible,
        ]


_NO_GROUP_ARGS = ["", "", "0", "", "", "0", "0", "0"]


@dataclass(frozen=True, slots=True)
class Claim:
    """Reserve ``resources`` on ``host_id`` for ``vm_id`` (a member of ``group``, if not None): its
    claim, or with ``target`` its target claim (the host it migrates to)."""

    vm_id: UUID
    host_id: str
    resources: Resources
    group: GroupClaim | None = None
    target: bool = False

    @property
    def claim_id(self) -> str:
        return target_claim_id(self.vm_id) if self.target else str(self.vm_id)


@dataclass(frozen=True, slots=True)
class HostWrite:
    """A host's state as a heartbeat says it is, with PostgreSQL's effective inventory (labels, taints,
    ratios, reserved: the agent's overlaid by the operator's) and pause flag."""

    host_id: str
    capacity: Resources
    overcommit: Overcommit
    reserved: Resources
    labels: Mapping[str, str]
    status: str
    heartbeat_at: float
    paused: bool
    # PostgreSQL's allocations, used only when the hash has none yet.
    allocated: Resources
    vm_count: int
    usage: Usage | None = None  # the agent's measurement, if it sent one
    taints: Sequence[Taint] = ()
    capabilities: Sequence[str] = ()

    def state(self) -> list[str]:
        """The values of :data:`STATE_FIELDS`, in order."""
        values = {rule.field: str(getattr(self.capacity, rule.field)) for rule in RESOURCES}
        values[EXTRA_FIELD] = extra_json(self.capacity.extra)
        values["status"] = self.status
        values["capabilities"] = capabilities_json(self.capabilities)
        values.update(inventory_fields(self.labels, self.taints, self.overcommit, self.reserved, self.paused))
        return [values[name] for name in STATE_FIELDS]

    def allocations(self) -> list[str]:
        """The values of :data:`ALLOCATION_FIELDS`, in order."""
        return [*_amounts(self.allocated), extra_json(self.allocated.extra), str(self.vm_count)]

    def measured(self) -> list[str]:
        """The measurements of :data:`USAGE_FIELDS`, in order; empty strings when none was sent."""
        if self.usage is None:
            return [""] * len(USAGE_FIELDS)
        return [repr(float(self.usage.cpu_used)), str(self.usage.memory_used_mb)]


def _state_fields() -> list[str]:
    names: list[str] = []
    for rule in RESOURCES:
        names += [rule.field, reserved_field(rule.field)]
        if rule.ratio_field is not None:
            names.append(rule.ratio_field)
    return [*names, EXTRA_FIELD, "labels", "taints", "status", "paused", "capabilities"]


def capabilities_json(capabilities: Sequence[str]) -> str:
    return json.dumps(sorted(set(capabilities)))


def inventory_fields(
    labels: Mapping[str, str], taints: Sequence[Taint], overcommit: Overcommit, reserved: Resources, paused: bool
) -> dict[str, str]:
    """The hash fields of what the operator may set (the effective values): written by every
    heartbeat, and by ``PATCH /v1/hosts/{id}`` at once."""
    fields = {reserved_field(rule.field): str(getattr(reserved, rule.field)) for rule in RESOURCES}
    for rule in RESOURCES:
        if rule.ratio_field is not None:
            fields[rule.ratio_field] = repr(float(getattr(overcommit, rule.name)))
    fields["labels"] = labels_json(labels)
    fields["taints"] = taints_json(taints) or "[]"
    fields["paused"] = "1" if paused else "0"
    return fields


# What a heartbeat writes every time, and what only a hash without allocations gets.
STATE_FIELDS: tuple[str, ...] = tuple(_state_fields())
ALLOCATION_FIELDS: tuple[str, ...] = (
    *(allocated_field(rule.field) for rule in RESOURCES),
    allocated_field(EXTRA_FIELD),
    "vm_count",
)


@dataclass(frozen=True, slots=True)
class CommittedVm:
    """A share of a host PostgreSQL counts: a VM's (``claim_id`` its id) or a migrating VM's on its
    target (its target claim id)."""

    claim_id: UUID | str
    resources: Resources


def lua_table(values: Iterable[str | None]) -> str:
    """A Lua table literal of strings (``false`` for None)."""
    return "{" + ", ".join("false" if v is None else f"'{v}'" for v in values) + "}"


def render_script(name: str) -> str:
    """A script of ``lua/`` with the fit rule and the resource field lists pasted in."""
    scripts = files("vmsched_common").joinpath("lua")
    text = scripts.joinpath(f"{name}.lua").read_text()
    return (
        text.replace("{{release claim}}", scripts.joinpath("release_claim.lua").read_text())
        .replace("{{fit rule}}", lua_shortfall_function())
        .replace("{{group rule}}", LUA_GROUP_RULE)
        .replace("{{counts}}", LUA_COUNTS)
        .replace("{{resource fields}}", lua_table(rule.field for rule in RESOURCES))
        .replace("{{ratio fields}}", lua_table(rule.ratio_field for rule in RESOURCES))
    )


def _claim_args(claim: Claim) -> list[str]:
    """A claim's arguments for the claim script (its ARGV layout, per claim)."""
    args = [claim.claim_id, claim.host_id, *_amounts(claim.resources), *_extra_args(claim.resources)]
    return args + (_NO_GROUP_ARGS if claim.group is None else claim.group.args())


def _claimed(replies: Any, changes: Any) -> Claimed:
    """The claim script's reply: per claim (outcome, detail); per host changed, its id, its change
    number before and its new one."""
    return Claimed(
        [ClaimResult(outcome=outcome, detail=detail) for outcome, detail in replies],
        {changes[at]: OwnChange(int(float(changes[at + 1])), int(changes[at + 2])) for at in range(0, len(changes), 3)},
    )


def _int(raw: Mapping[str, str], key: str) -> int:
    return int(raw.get(key) or 0)


def _resources(raw: Mapping[str, str], name: Any) -> Resources:
    # Written by vmsched's own scripts from validated values: built without validating again (the
    # schedulers read hundreds of hosts a round).
    return Resources.model_construct(
        None,
        **{rule.field: _int(raw, name(rule.field)) for rule in RESOURCES},
        extra=extra_of(raw.get(name(EXTRA_FIELD))),
    )


def _amounts(resources: Resources) -> list[str]:
    return [str(getattr(resources, rule.field)) for rule in RESOURCES]


def _extra_args(resources: Resources) -> list[str]:
    """The claim's named extra resources: how many, then each name and amount, sorted by name."""
    asked = sorted((name, count) for name, count in resources.extra.items() if count > 0)
    return [str(len(asked)), *(part for name, count in asked for part in (name, str(count)))]


def parse_usage(raw: Mapping[str, str | None]) -> MeasuredUsage | None:
    """The measurement in a host's hash (fields of :data:`USAGE_FIELDS`), None when it has none."""
    (cpu, cpu_then, _), (memory, memory_then, _) = USAGE_FIELDS
    if not raw.get(cpu):
        return None
    return MeasuredUsage(
        cpu_used=float(raw.get(cpu) or 0.0),
        memory_used_mb=int(raw.get(memory) or 0),
        allocated_cpu=int(raw.get(cpu_then) or 0),
        allocated_memory_mb=int(raw.get(memory_then) or 0),
    )


def parse_host(host_id: str, raw: Mapping[str, str]) -> SnapshotHost | None:
    """A host record from its hash, or None for a hash without capacity (half-written, flushed)."""
    if "cpu" not in raw:
        return None
    return SnapshotHost(
        id=host_id,
        status=raw.get("status", HostStatus.OFFLINE.value),
        labels=json.loads(raw.get("labels") or "{}"),
        capacity=_resources(raw, str),
        reserved=_resources(raw, reserved_field),
        overcommit=Overcommit.model_construct(
            None, **{rule.name: float(raw.get(rule.ratio_field) or 1.0) for rule in RESOURCES if rule.ratio_field}
        ),
        allocated=_resources(raw, allocated_field),
        vm_count=_int(raw, "vm_count"),
        scheduling_paused=raw.get("paused") == "1",
        last_heartbeat=float(raw.get("hb") or 0.0),
        synced=raw.get("synced") == "1",
        usage=parse_usage(raw),
        taints=taints_of(json.loads(raw.get("taints") or "[]")) or (),
        capabilities=tuple(json.loads(raw.get("capabilities") or "[]")),
    )


class Snapshot:
    """Reads and atomic updates of the Redis capacity snapshot."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self._claim: AsyncScript = redis.register_script(render_script("claim"))
        self._release: AsyncScript = redis.register_script(render_script("release"))
        self._heartbeat: AsyncScript = redis.register_script(render_script("heartbeat"))
        self._set_fields: AsyncScript = redis.register_script(render_script("set_host_fields"))
        self._reconcile: AsyncScript = redis.register_script(render_script("reconcile_host"))
        self._forget: AsyncScript = redis.register_script(render_script("forget_host"))
        self._reconcile_group: AsyncScript = redis.register_script(render_script("reconcile_group"))
        self._move_claim: AsyncScript = redis.register_script(render_script("move_claim"))

    # -- keys -----------------------------------------------------------------------------------
    def host_key(self, host_id: str) -> str:
        return f"{self.prefix}:host:{host_id}"

    def host_vms_key(self, host_id: str) -> str:
        return f"{self.prefix}:host:{host_id}:vms"

    def claim_key(self, vm_id: UUID | str) -> str:
        return f"{self.prefix}:claim:{vm_id}"

    def group_key(self, group_id: UUID | str) -> str:
        return f"{self.prefix}:group:{group_id}"

    def group_vms_key(self, group_id: UUID | str) -> str:
        return f"{self.prefix}:group:{group_id}:vms"

    @property
    def hosts_key(self) -> str:
        return f"{self.prefix}:hosts"

    @property
    def released_key(self) -> str:
        """Claim id -> when it was released (Redis's clock): a reconcile whose PostgreSQL view
        predates a release does not restore the claim (lua/reconcile_host.lua)."""
        return f"{self.prefix}:released"

    @property
    def changed_key(self) -> str:
        return f"{self.prefix}:changed"

    @property
    def seq_key(self) -> str:
        return f"{self.prefix}:seq"

    @property
    def round_robin_key(self) -> str:
        return f"{self.prefix}:rr"

    # -- reads ----------------------------------------------------------------------------------
    async def current_seq(self) -> int:
        return int(await self.redis.get(self.seq_key) or 0)

    async def host_ids(self) -> list[str]:
        members: set[str] = await self.redis.smembers(self.hosts_key)  # type: ignore[assignment]
        return sorted(members)

    async def read_hosts(self, host_ids: Sequence[str]) -> dict[str, SnapshotHost | None]:
        """The named hosts in one round trip; None for a host with no hash (gone, or flushed)."""
        if not host_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for host_id in host_ids:
                pipe.hgetall(self.host_key(host_id))
            raws: list[dict[str, str]] = await pipe.execute()
        return {host_id: parse_host(host_id, raw) for host_id, raw in zip(host_ids, raws, strict=True)}

    async def read_all(self, *, slice_size: int = 1000) -> tuple[int, dict[str, SnapshotHost]]:
        """Every host, and the change number the read is at least as new as. Read ``slice_size`` hosts
        a round trip: between two, the caller's other tasks run (10,000 hashes parse in about 0.1 s)."""
        seq = await self.current_seq()
        ids = await self.host_ids()
        hosts: dict[str, SnapshotHost] = {}
        for start in range(0, len(ids), slice_size):
            read = await self.read_hosts(ids[start : start + slice_size])
            hosts.update((host_id, record) for host_id, record in read.items() if record is not None)
        return seq, hosts

    async def changed_since(self, seq: int) -> tuple[int, dict[str, int]]:
        """Hosts changed after change number ``seq`` with the number of their last change, and the
        newest change number seen."""
        rows: list[tuple[str, float]] = await self.redis.zrangebyscore(  # type: ignore[assignment]
            self.changed_key, f"({seq}", "+inf", withscores=True
        )
        if not rows:
            return seq, {}
        changed = {host_id: int(score) for host_id, score in rows}
        return max(changed.values()), changed

    async def read_usage(self, host_ids: Sequence[str]) -> dict[str, MeasuredUsage | None]:
        """The named hosts' last measured usage in one round trip (None: not reported, or no hash)."""
        fields = [name for triple in USAGE_FIELDS for name in triple[:2]]
        async with self.redis.pipeline(transaction=False) as pipe:
            for host_id in host_ids:
                pipe.hmget(self.host_key(host_id), fields)
            replies: list[list[str | None]] = await pipe.execute()
        return {
            host_id: parse_usage(dict(zip(fields, values, strict=True)))
            for host_id, values in zip(host_ids, replies, strict=True)
        }

    async def group_members(self, group_ids: Sequence[UUID]) -> dict[UUID, dict[str, int]]:
        """Each group's members per domain, as the claims counted them, in one round trip."""
        if not group_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for group_id in group_ids:
                pipe.hgetall(self.group_key(group_id))
            raws: list[dict[str, str]] = await pipe.execute()
        return {
            group_id: {domain: int(count) for domain, count in raw.items() if int(count) > 0}
            for group_id, raw in zip(group_ids, raws, strict=True)
        }

    async def claim_of(self, claim_id: UUID | str) -> str | None:
        """The host a claim (a VM id, or a target claim id) is on, if it exists."""
        host: str | None = await self.redis.hget(self.claim_key(claim_id), "host")  # type: ignore[assignment]
        return host

    async def hosts_held(self, claim_ids: Sequence[UUID]) -> dict[UUID, str]:
        """The host each of ``claim_ids`` holds a claim on, for those that hold one (one round trip)."""
        if not claim_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for claim_id in claim_ids:
                pipe.hget(self.claim_key(claim_id), "host")
            hosts: list[str | None] = await pipe.execute()
        return {claim_id: host for claim_id, host in zip(claim_ids, hosts, strict=True) if host is not None}

    async def next_round_robin(self, count: int = 1) -> int:
        """A cursor shared by every scheduler replica, so the rotation holds across them: the first
        of ``count`` consecutive values reserved for the caller."""
        return int(await self.redis.incrby(self.round_robin_key, count)) - count + 1

    async def peek_round_robin(self) -> int:
        """The cursor :meth:`next_round_robin` would hand out next, without taking it (what-if)."""
        return int(await self.redis.get(self.round_robin_key) or 0) + 1

    # -- atomic updates -------------------------------------------------------------------------
    async def claim_many(self, claims: Sequence[Claim], now: float, *, all_or_nothing: bool = False) -> Claimed:
        """Claim each, in order, in one script run (one round trip, atomic as a whole). With
        ``all_or_nothing``, none is reserved unless every one fits (outcome ``gang`` for those that
        would have)."""
        if not claims:
            return Claimed([], {})
        keys = [self.changed_key, self.seq_key]
        args: list[str] = [repr(now), "1" if all_or_nothing else "0"]
        for claim in claims:
            keys += self._claim_keys(claim)
            args += _claim_args(claim)
        return _claimed(*await self._claim(keys=keys, args=args))

    async def preempt(self, claim: Claim, victims: Sequence[UUID], now: float) -> Claimed:
        """Claim for ``claim.vm_id`` as if ``victims`` (VMs claimed on ``claim.host_id``) were gone,
        and if it fits, release their claims and reserve it, in one atomic step: the room the victims
        leave is never free for anyone else. ``victim_moved`` when a victim holds no claim there."""
        keys = [self.changed_key, self.seq_key, *self._claim_keys(claim), *(self.claim_key(v) for v in victims)]
        args = [repr(now), "p", *_claim_args(claim), *(str(vm_id) for vm_id in victims)]
        return _claimed(*await self._claim(keys=keys, args=args))

    def _claim_keys(self, claim: Claim) -> list[str]:
        """A claim's keys for the claim script: host, claim, host's claimed VMs, group, group's VMs."""
        group = "-" if claim.group is None else str(claim.group.rule.id)  # "-": a key never written
        keys = [self.host_key(claim.host_id), self.claim_key(claim.claim_id), self.host_vms_key(claim.host_id)]
        return [*keys, self.group_key(group), self.group_vms_key(group)]

    async def claim(self, vm_id: UUID, host_id: str, resources: Resources, now: float) -> ClaimResult:
        (result,) = (await self.claim_many([Claim(vm_id, host_id, resources)], now)).results
        return result

    async def release_many(self, claim_ids: Sequence[UUID | str]) -> list[str | None]:
        """Free each claim (a VM's id, or a target claim id); per claim the host it was on, or None
        when there was none."""
        if not claim_ids:
            return []
        hosts: list[str | None] = await self._release(
            keys=[self.changed_key, self.seq_key, *(self.claim_key(claim_id) for claim_id in claim_ids)],
            args=[self.prefix, *(str(claim_id) for claim_id in claim_ids)],
        )
        return [host or None for host in hosts]

    async def release(self, claim_id: UUID | str) -> str | None:
        (host,) = await self.release_many([claim_id])
        return host

    async def move_claim(self, vm_id: UUID) -> tuple[str | None, str | None]:
        """A migration is done: the VM's claim on its source is given back and its target claim
        becomes its claim. Returns (the source it was released on, the host it holds now), None for
        what was not there; without a target claim (moved already) nothing changes: (None, None)."""
        source, target = await self._move_claim(
            keys=[self.changed_key, self.seq_key, self.claim_key(vm_id), self.claim_key(target_claim_id(vm_id))],
            args=[self.prefix, str(vm_id), target_claim_id(vm_id)],
        )
        return source or None, target or None

    async def record_heartbeats(self, writes: Sequence[HostWrite], bump_interval: float) -> None:
        """Fold heartbeats into the hosts' hashes, in one script run. A host is announced on the
        change feed when its state changed, or every ``bump_interval`` seconds when it did not (its
        measured usage is never a change: see :data:`USAGE_FIELDS`)."""
        if not writes:
            return
        args: list[str] = [
            repr(bump_interval),
            str(len(STATE_FIELDS)),
            str(len(ALLOCATION_FIELDS)),
            str(len(USAGE_FIELDS)),
        ]
        args += [*STATE_FIELDS, *ALLOCATION_FIELDS]
        for measured, then, allocation in USAGE_FIELDS:
            args += [measured, then, str(ALLOCATION_FIELDS.index(allocation) + 1)]
        for write in writes:
            args += [write.host_id, repr(write.heartbeat_at), *write.state(), *write.allocations(), *write.measured()]
        await self._heartbeat(
            keys=[self.hosts_key, self.changed_key, self.seq_key, *(self.host_key(w.host_id) for w in writes)],
            args=args,
        )

    async def set_host_fields(self, host_id: str, fields: Mapping[str, str]) -> bool:
        args: list[str] = [host_id]
        for key, value in fields.items():
            args += [key, value]
        done: int = await self._set_fields(keys=[self.host_key(host_id), self.changed_key, self.seq_key], args=args)
        return bool(done)

    async def reconcile_host(
        self,
        host_id: str,
        allocated: Resources,
        vm_count: int,
        committed: Sequence[CommittedVm],
        now: float,
        grace: float,
        view_at: float,
    ) -> tuple[int, int, int, int]:
        """Set a host's allocations to PostgreSQL's ``committed`` shares (read at ``view_at``, Redis's
        clock: :meth:`server_time`) plus its claims in flight; returns (restored, dropped, in flight,
        stale: committed shares released since ``view_at``, not counted)."""
        args: list[Any] = [self.prefix, host_id, repr(now), repr(grace), repr(view_at), *_amounts(allocated)]
        args += [extra_json(allocated.extra), str(vm_count)]
        for vm in committed:
            args += [str(vm.claim_id), *_amounts(vm.resources), extra_json(vm.resources.extra)]
        restored, dropped, in_flight, stale = await self._reconcile(
            keys=[self.host_key(host_id), self.host_vms_key(host_id), self.changed_key, self.seq_key],
            args=args,
        )
        return int(restored), int(dropped), int(in_flight), int(stale)

    async def reconcile_group(
        self, group_id: UUID, members: Sequence[tuple[UUID | str, str]], now: float, grace: float, view_at: float
    ) -> tuple[int, int, int]:
        """Set a group's counts to PostgreSQL's ``members`` (claim id, domain) plus its claims younger
        than ``grace`` that PostgreSQL does not count yet; returns (members, in flight, dropped)."""
        args: list[str] = [self.prefix, str(group_id), repr(now), repr(grace), repr(view_at)]
        for vm_id, domain in members:
            args += [str(vm_id), domain]
        committed, in_flight, dropped = await self._reconcile_group(
            keys=[self.group_key(group_id), self.group_vms_key(group_id)], args=args
        )
        return int(committed), int(in_flight), int(dropped)

    async def server_time(self) -> float:
        """Redis's clock, in seconds: the clock releases are remembered by (``released_key``)."""
        seconds, microseconds = await self.redis.time()
        return seconds + microseconds / 1_000_000

    async def forget_releases(self, before: float) -> int:
        """Forget the releases remembered before ``before`` (Redis's clock); returns how many."""
        forgotten: int = await self.redis.zremrangebyscore(self.released_key, "-inf", f"({before!r}")
        return forgotten

    async def forget_host(self, host_id: str) -> None:
        """Remove a host (deleted from PostgreSQL) from the snapshot. It stays named on the change
        feed, so that every scheduler's next refresh reads it, finds no hash and drops it."""
        await self._forget(
            keys=[self.host_key(host_id), self.host_vms_key(host_id), self.hosts_key, self.changed_key, self.seq_key],
            args=[host_id],
        )
