"""The capacity snapshot in Redis: one hash per host, claims keyed by VM id, and a change feed.

Layout (``p`` is ``VMSCHED_REDIS_KEY_PREFIX``):

- ``p:host:<id>``: capacity, overcommit ratios, labels, status, pause flag, last heartbeat, and the
  allocations (``a_*``, ``vm_count``) once ``synced`` is set;
- ``p:host:<id>:vms``: ids of VMs holding a claim on the host;
- ``p:claim:<vm id>``: the host and resources one VM holds;
- ``p:hosts``: every host id; ``p:seq`` and ``p:changed`` (host id scored by the change number
  that last touched it): a reader remembers the last number it saw and re-reads only what changed;
- ``p:rr``: the shared round-robin cursor.

All multi-key updates are Lua scripts (in ``lua/``), so each is atomic.
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

from vmsched_common.messages import HostStatus, Resources

ClaimOutcome = Literal["claimed", "held", "unknown_host", "offline", "paused", "insufficient"]


@dataclass(frozen=True, slots=True)
class HostRecord:
    """One host as the snapshot knows it."""

    id: str
    status: str
    labels: Mapping[str, str]
    capacity: Resources
    allocated: Resources
    vm_count: int
    scheduling_paused: bool
    last_heartbeat: float
    cpu_ratio: float
    memory_ratio: float
    synced: bool


@dataclass(frozen=True, slots=True)
class ClaimResult:
    outcome: ClaimOutcome
    detail: str

    @property
    def holds(self) -> bool:
        """The VM now holds a claim (new or from before) on host ``detail``."""
        return self.outcome in ("claimed", "held")


@dataclass(frozen=True, slots=True)
class HeartbeatWrite:
    host_id: str
    capacity: Resources
    cpu_ratio: float
    memory_ratio: float
    labels: Mapping[str, str]
    status: str
    heartbeat_at: float
    paused: bool
    # PostgreSQL's allocations, used only when the hash has none yet.
    allocated: Resources
    vm_count: int


@dataclass(frozen=True, slots=True)
class CommittedVm:
    vm_id: UUID
    resources: Resources


def _script(name: str) -> str:
    return files("vmsched_common").joinpath("lua", f"{name}.lua").read_text()


def _int(raw: Mapping[str, str], key: str) -> int:
    return int(raw.get(key) or 0)


def parse_host(host_id: str, raw: Mapping[str, str]) -> HostRecord | None:
    """A host record from its hash, or None for a hash without capacity (half-written, flushed)."""
    if "cpu" not in raw:
        return None
    return HostRecord(
        id=host_id,
        status=raw.get("status", HostStatus.OFFLINE.value),
        labels=json.loads(raw.get("labels") or "{}"),
        capacity=Resources(
            cpu=_int(raw, "cpu"),
            memory_mb=_int(raw, "memory_mb"),
            disk_gb=_int(raw, "disk_gb"),
            gpu=_int(raw, "gpu"),
        ),
        allocated=Resources(
            cpu=_int(raw, "a_cpu"),
            memory_mb=_int(raw, "a_memory_mb"),
            disk_gb=_int(raw, "a_disk_gb"),
            gpu=_int(raw, "a_gpu"),
        ),
        vm_count=_int(raw, "vm_count"),
        scheduling_paused=raw.get("paused") == "1",
        last_heartbeat=float(raw.get("hb") or 0.0),
        cpu_ratio=float(raw.get("cpu_ratio") or 1.0),
        memory_ratio=float(raw.get("memory_ratio") or 1.0),
        synced=raw.get("synced") == "1",
    )


class Snapshot:
    """Reads and atomic updates of the Redis capacity snapshot."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self._claim: AsyncScript = redis.register_script(_script("claim"))
        self._release: AsyncScript = redis.register_script(_script("release"))
        self._heartbeat: AsyncScript = redis.register_script(_script("heartbeat"))
        self._set_fields: AsyncScript = redis.register_script(_script("set_host_fields"))
        self._reconcile: AsyncScript = redis.register_script(_script("reconcile_host"))

    # -- keys -----------------------------------------------------------------------------------
    def host_key(self, host_id: str) -> str:
        return f"{self.prefix}:host:{host_id}"

    def host_vms_key(self, host_id: str) -> str:
        return f"{self.prefix}:host:{host_id}:vms"

    def claim_key(self, vm_id: UUID | str) -> str:
        return f"{self.prefix}:claim:{vm_id}"

    @property
    def hosts_key(self) -> str:
        return f"{self.prefix}:hosts"

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

    async def read_hosts(self, host_ids: Sequence[str]) -> dict[str, HostRecord | None]:
        """The named hosts in one round trip; None for a host with no hash (gone, or flushed)."""
        if not host_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for host_id in host_ids:
                pipe.hgetall(self.host_key(host_id))
            raws: list[dict[str, str]] = await pipe.execute()
        return {host_id: parse_host(host_id, raw) for host_id, raw in zip(host_ids, raws, strict=True)}

    async def read_all(self) -> tuple[int, dict[str, HostRecord]]:
        """Every host, and the change number the read is at least as new as."""
        seq = await self.current_seq()
        hosts = await self.read_hosts(await self.host_ids())
        return seq, {host_id: record for host_id, record in hosts.items() if record is not None}

    async def changed_since(self, seq: int) -> tuple[int, list[str]]:
        """Hosts changed after change number ``seq``, and the newest change number seen."""
        rows: list[tuple[str, float]] = await self.redis.zrangebyscore(  # type: ignore[assignment]
            self.changed_key, f"({seq}", "+inf", withscores=True
        )
        if not rows:
            return seq, []
        return int(max(score for _, score in rows)), [host_id for host_id, _ in rows]

    async def claim_of(self, vm_id: UUID) -> str | None:
        host: str | None = await self.redis.hget(self.claim_key(vm_id), "host")  # type: ignore[assignment]
        return host

    async def next_round_robin(self) -> int:
        """A cursor shared by every scheduler replica, so the rotation holds across them."""
        return int(await self.redis.incr(self.round_robin_key))

    # -- atomic updates -------------------------------------------------------------------------
    async def claim(self, vm_id: UUID, host_id: str, resources: Resources, now: float) -> ClaimResult:
        outcome, detail = await self._claim(
            keys=[
                self.host_key(host_id),
                self.claim_key(vm_id),
                self.host_vms_key(host_id),
                self.changed_key,
                self.seq_key,
            ],
            args=[str(vm_id), host_id, *_resource_args(resources), repr(now)],
        )
        return ClaimResult(outcome=outcome, detail=detail)

    async def claim_many(self, claims: Sequence[tuple[UUID, str, Resources]], now: float) -> list[ClaimResult]:
        """:meth:`claim` for each (vm id, host id, resources), in one pipelined round trip. Each claim
        is still its own atomic script, run in order: a later one sees what an earlier one took."""
        if not claims:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for vm_id, host_id, resources in claims:
                await self._claim(
                    keys=[
                        self.host_key(host_id),
                        self.claim_key(vm_id),
                        self.host_vms_key(host_id),
                        self.changed_key,
                        self.seq_key,
                    ],
                    args=[str(vm_id), host_id, *_resource_args(resources), repr(now)],
                    client=pipe,
                )
            replies: list[list[str]] = await pipe.execute()
        return [ClaimResult(outcome=outcome, detail=detail) for outcome, detail in replies]  # type: ignore[arg-type]

    async def release(self, vm_id: UUID) -> str | None:
        """Free the VM's claim; the host it was on, or None when there was none."""
        host: str | None = await self._release(
            keys=[self.claim_key(vm_id), self.changed_key, self.seq_key], args=[self.prefix, str(vm_id)]
        )
        return host

    async def record_heartbeats(self, writes: Iterable[HeartbeatWrite], bump_interval: float) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for w in writes:
                await self._heartbeat(
                    keys=[self.host_key(w.host_id), self.hosts_key, self.changed_key, self.seq_key],
                    args=[
                        w.host_id,
                        *_resource_args(w.capacity),
                        repr(w.cpu_ratio),
                        repr(w.memory_ratio),
                        json.dumps(dict(w.labels), sort_keys=True, separators=(",", ":")),
                        w.status,
                        repr(w.heartbeat_at),
                        repr(bump_interval),
                        *_resource_args(w.allocated),
                        str(w.vm_count),
                        "1" if w.paused else "0",
                    ],
                    client=pipe,
                )
            await pipe.execute()

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
    ) -> tuple[int, int, int]:
        args: list[Any] = [
            self.prefix,
            host_id,
            repr(now),
            repr(grace),
            *_resource_args(allocated),
            str(vm_count),
        ]
        for vm in committed:
            args += [str(vm.vm_id), *_resource_args(vm.resources)]
        restored, dropped, in_flight = await self._reconcile(
            keys=[self.host_key(host_id), self.host_vms_key(host_id), self.changed_key, self.seq_key],
            args=args,
        )
        return int(restored), int(dropped), int(in_flight)

    async def forget_host(self, host_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.host_key(host_id))
            pipe.srem(self.hosts_key, host_id)
            pipe.zrem(self.changed_key, host_id)
            await pipe.execute()


def _resource_args(resources: Resources) -> list[str]:
    return [str(resources.cpu), str(resources.memory_mb), str(resources.disk_gb), str(resources.gpu)]


def effective_limit(capacity: int, ratio: float) -> int:
    """What a host may hand out of one resource: capacity times its overcommit ratio, rounded down.

    The same rule stands in ``claim.lua`` and in the PostgreSQL guard of the scheduler."""
    return int(capacity * ratio + 1e-9)
