"""Storage pools in the Redis snapshot (vmsched_domain.storage's rule).

- a host's hash: ``pools``, the pools its heartbeat lists (a JSON list of ``{name, kind, capacity_gb,
  tags}``, by name), and ``a_pools``, what its VMs' volumes take of its local pools (a JSON
  ``{name: GB}`` map, kept by the claim and release scripts as ``a_extra`` is);
- ``p:storage_pools``: the shared pools, counted once whichever host a VM lands on: per pool
  ``c:<name>`` its capacity and ``t:<name>`` its tags (a JSON list: the operator's, written by
  ``PUT /v1/storage-pools/{name}``), ``a:<name>`` what is allocated on it (kept by the claim and
  release scripts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from redis.asyncio import Redis

from vmsched_contract.storage import PoolKind, StoragePool
from vmsched_domain.extra import extra_of
from vmsched_domain.storage import PoolRoom, PoolTake

POOLS_FIELD = "pools"
POOLS_ALLOCATED_FIELD = "a_pools"


def shared_pools_key(prefix: str) -> str:
    return f"{prefix}:storage_pools"


def pools_json(pools: Sequence[StoragePool]) -> str:
    """A heartbeat's pools as the host's hash keeps them (the last of a repeated name wins)."""
    by_name = {pool.name: pool for pool in pools}
    return json.dumps(
        [
            {
                "name": name,
                "kind": by_name[name].kind.value,
                # A shared pool's capacity is the operator's: none here.
                "capacity_gb": by_name[name].capacity_gb if by_name[name].kind is PoolKind.LOCAL else None,
                "tags": sorted(set(by_name[name].tags)),
            }
            for name in sorted(by_name)
        ],
        separators=(",", ":"),
    )


def host_pools_of(raw: str | None, allocated: str | None) -> tuple[PoolRoom, ...]:
    """A host's pools as the engine reads them: local ones with their numbers, shared ones by name."""
    if not raw or raw == "[]":
        return ()
    used = extra_of(allocated)
    return tuple(
        PoolRoom(p["name"], False, int(p["capacity_gb"]), used.get(p["name"], 0), frozenset(p["tags"]))
        if p["kind"] == PoolKind.LOCAL.value
        else PoolRoom(p["name"], True, 0, 0)
        for p in json.loads(raw)
    )


def take_args(takes: Sequence[PoolTake]) -> list[str]:
    """A claim's pools for the claim script: how many, then each one's name, GB and tags (JSON)."""
    args = [str(len(takes))]
    for take in takes:
        args += [take.name, str(take.gb), json.dumps(sorted(take.tags))]
    return args


async def read_shared_pools(redis: Redis, prefix: str) -> dict[str, PoolRoom]:
    """Every shared pool the operator has set, with what is allocated on it."""
    raw = {_text(k): _text(v) for k, v in (await redis.hgetall(shared_pools_key(prefix))).items()}
    found: dict[str, PoolRoom] = {}
    for field, value in raw.items():
        kind, _, name = field.partition(":")
        if kind == "c":
            tags = frozenset(json.loads(raw.get(f"t:{name}") or "[]"))
            found[name] = PoolRoom(name, True, int(value), int(raw.get(f"a:{name}") or 0), tags)
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def put_shared_pool(redis: Redis, prefix: str, name: str, capacity_gb: int, tags: Sequence[str]) -> None:
    """The operator's capacity and tags of a shared pool (what is allocated on it stays)."""
    await redis.hset(
        shared_pools_key(prefix), mapping={f"c:{name}": str(capacity_gb), f"t:{name}": json.dumps(sorted(set(tags)))}
    )


async def forget_shared_pool(redis: Redis, prefix: str, name: str) -> None:
    await redis.hdel(shared_pools_key(prefix), f"c:{name}", f"t:{name}", f"a:{name}")


async def set_shared_allocated(redis: Redis, prefix: str, allocated: Mapping[str, int]) -> None:
    """What PostgreSQL says is allocated on each shared pool (after a flush: the claims are gone too)."""
    if allocated:
        await redis.hset(shared_pools_key(prefix), mapping={f"a:{name}": str(gb) for name, gb in allocated.items()})
