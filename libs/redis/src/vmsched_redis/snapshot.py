"""The capacity snapshot in Redis: one hash per host, claims keyed by VM id, and a change feed.

Layout (``p`` is ``VMSCHED_REDIS_KEY_PREFIX``):

- ``p:host:<id>``: per resource of the fit rule its capacity (``cpu``, ``memory_mb``, ...), what is
  reserved for the hypervisor (``r_cpu``, ...), its allocation ratio where it has one
  (``cpu_ratio``, ...) and, once ``synced`` is set, what is allocated (``a_cpu``, ..., ``vm_count``);
  its named extra resources (``extra``) and what of them is allocated (``a_extra``), each a JSON
  ``{name: count}`` map (``vmsched_domain.extra``);
  then labels, taints, status, pause flag and last heartbeat (labels, taints, ratios and reserved
  as PostgreSQL has them: the agent's overlaid by the operator's, ``vmsched_pg.inventory``);
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
- ``p:storage_pools``: the shared storage pools (capacity, tags, allocation), and a host's ``pools``
  and ``a_pools``: :mod:`vmsched_redis.storage_pools`;
- ``p:released``: claim id scored by when (Redis's clock) its claim was last given back, kept a while
  so that a reconcile that read PostgreSQL before a release does not bring the claim back.

All multi-key updates are Lua scripts (in ``lua/``), so each is atomic. The scripts name no resource:
the fit rule and the field lists are pasted into them from :mod:`vmsched_domain.fit` when loaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from vmsched_contract.messages import Overcommit, Resources
from vmsched_domain.claims import target_claim_id
from vmsched_domain.extra import extra_json
from vmsched_domain.storage import PoolRoom
from vmsched_domain.usage import MeasuredUsage
from vmsched_redis.claims import Claim, Claimed, ClaimResult, CommittedVm, claimed_from_reply, script_args
from vmsched_redis.host_hash import (
    ALLOCATION_FIELDS,
    RATIO_FIELDS,
    STATE_FIELDS,
    USAGE_FIELDS,
    HostWrite,
    SnapshotHost,
    amounts,
    parse_host,
    parse_ratios,
    parse_usage,
)
from vmsched_redis.scripts import render_script
from vmsched_redis.storage_pools import read_shared_pools


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
        self._restore_pool_claims: AsyncScript = redis.register_script(render_script("restore_pool_claims"))

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

    async def read_ratios(self, host_ids: Sequence[str]) -> dict[str, Overcommit]:
        """The named hosts' allocation ratios (the operator's over the agent's), in one round trip of
        three fields each; a host with no hash is left out."""
        if not host_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for host_id in host_ids:
                pipe.hmget(self.host_key(host_id), list(RATIO_FIELDS))
            replies: list[list[str | None]] = await pipe.execute()
        return {
            host_id: parse_ratios(dict(zip(RATIO_FIELDS, values, strict=True)))
            for host_id, values in zip(host_ids, replies, strict=True)
            if any(value is not None for value in values)
        }

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

    async def shared_pools(self) -> dict[str, PoolRoom]:
        """Every shared storage pool with its capacity, tags and allocation (:mod:`vmsched_redis.storage_pools`)."""
        return await read_shared_pools(self.redis, self.prefix)

    async def restore_pool_claims(self, pools: Mapping[UUID, tuple[str, str]]) -> int:
        """Give existing claims of these VMs their pools (JSON ``{pool: GB}``, shared then local) where
        they have none."""
        given: int = await self._restore_pool_claims(
            keys=[self.claim_key(vm_id) for vm_id in pools], args=[part for pair in pools.values() for part in pair]
        )
        return given

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
            args += script_args(claim)
        return claimed_from_reply(*await self._claim(keys=keys, args=args))

    async def preempt(self, claim: Claim, victims: Sequence[UUID], now: float) -> Claimed:
        """Claim for ``claim.vm_id`` as if ``victims`` (VMs claimed on ``claim.host_id``) were gone,
        and if it fits, release their claims and reserve it, in one atomic step: the room the victims
        leave is never free for anyone else. ``victim_moved`` when a victim holds no claim there."""
        keys = [self.changed_key, self.seq_key, *self._claim_keys(claim), *(self.claim_key(v) for v in victims)]
        args = [repr(now), "p", *script_args(claim), *(str(vm_id) for vm_id in victims)]
        return claimed_from_reply(*await self._claim(keys=keys, args=args))

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
        args: list[Any] = [self.prefix, host_id, repr(now), repr(grace), repr(view_at), *amounts(allocated)]
        args += [extra_json(allocated.extra), str(vm_count)]
        for vm in committed:
            args += [str(vm.claim_id), *amounts(vm.resources), extra_json(vm.resources.extra)]
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
