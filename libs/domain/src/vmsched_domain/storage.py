"""The storage pool rule: where a VM's volumes go on a host, and whether a pool has room.

The pools a host reaches are its own ``local`` pools (capacity from its agent) and the ``shared`` pools
its heartbeat names (capacity and tags from the operator, space counted once for every host). A pool
has room for ``requested`` GB when::

    allocated + requested <= capacity

(no overcommit, nothing reserved). A VM's volumes are assigned first fit, as CloudStack's
FirstFitStoragePoolAllocator places each volume: volumes in the order the VM lists them, each to the
first pool in name order that the host reaches, that carries every tag the volume asks for and that
has room for it once the volumes before it are counted (:func:`assign_volumes`). A migrating VM's
volume on a shared pool stays where it is (``stays_on``): the target must reach that pool, and takes
nothing of it (the volume is counted there already); its local volumes are placed anew. The engine's
``storage`` filter computes the same assignment over the whole fleet; the Redis claim checks the
assignment it is given with :func:`lua_pool_refusal_function` and PostgreSQL's guard with
:func:`sql_pool_fits`; tests/integration/test_storage_rule.py proves the three agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

STORAGE = "storage"  # the rule's name in rejections and reasons


@dataclass(frozen=True, slots=True)
class VolumeAsk:
    """A volume a VM asks for."""

    size_gb: int
    tags: frozenset[str] = frozenset()
    stays_on: str | None = None  # a migrating VM's shared pool: the host must reach it; it takes no room


@dataclass(frozen=True, slots=True)
class PoolRoom:
    """A pool as seen from one host: its capacity, what is allocated on it and its tags."""

    name: str
    shared: bool
    capacity_gb: int
    allocated_gb: int
    tags: frozenset[str] = frozenset()

    @property
    def free_gb(self) -> int:
        return self.capacity_gb - self.allocated_gb


def pool_fits(requested_gb: int, capacity_gb: int, allocated_gb: int) -> bool:
    """The rule on one pool: ``allocated + requested <= capacity``."""
    return allocated_gb + requested_gb <= capacity_gb


def takes(pool: PoolRoom, volume: VolumeAsk, booked_gb: int = 0) -> bool:
    """Whether ``pool`` takes ``volume`` once ``booked_gb`` more is on it: it carries every tag, and has room."""
    return volume.tags <= pool.tags and pool_fits(volume.size_gb + booked_gb, pool.capacity_gb, pool.allocated_gb)


def assign_volumes(volumes: Sequence[VolumeAsk], pools: Iterable[PoolRoom]) -> tuple[str, ...] | None:
    """The pool of each volume, first fit (volumes in order, pools in name order); None when one
    fits no pool."""
    ordered = sorted(pools, key=lambda pool: pool.name)
    booked: dict[str, int] = {}
    chosen: list[str] = []
    for volume in volumes:
        if volume.stays_on is not None:
            if not any(p.shared and p.name == volume.stays_on for p in ordered):
                return None
            chosen.append(volume.stays_on)
            continue
        pool = next((p for p in ordered if takes(p, volume, booked.get(p.name, 0))), None)
        if pool is None:
            return None
        booked[pool.name] = booked.get(pool.name, 0) + volume.size_gb
        chosen.append(pool.name)
    return tuple(chosen)


def per_pool(volumes: Sequence[VolumeAsk], assignment: Sequence[str]) -> dict[str, int]:
    """GB per pool of an assignment (what a claim takes of each pool; a volume that stays takes none)."""
    total: dict[str, int] = {}
    for volume, pool in zip(volumes, assignment, strict=True):
        if volume.stays_on is None:
            total[pool] = total.get(pool, 0) + volume.size_gb
    return total


@dataclass(frozen=True, slots=True)
class PoolTake:
    """What a claim takes of one pool: the GB of its volumes there, and every tag they ask."""

    name: str
    gb: int
    tags: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class VolumePlacement:
    """Where a placed VM's volumes went: each volume's pool, and what that takes of each pool."""

    pools: tuple[str, ...] = ()  # per volume, in the VM's order
    takes: tuple[PoolTake, ...] = ()  # per pool, by name


NO_VOLUMES = VolumePlacement()


def pool_takes(volumes: Sequence[VolumeAsk], assignment: Sequence[str]) -> tuple[PoolTake, ...]:
    """An assignment as a claim carries it: one :class:`PoolTake` per pool, in name order."""
    tags: dict[str, frozenset[str]] = {}
    for volume, pool in zip(volumes, assignment, strict=True):
        if volume.stays_on is None:
            tags[pool] = tags.get(pool, frozenset()) | volume.tags
    return tuple(PoolTake(name, gb, tags[name]) for name, gb in sorted(per_pool(volumes, assignment).items()))


def refusal(
    assignment: Mapping[str, int], pools: Mapping[str, PoolRoom], tags: Mapping[str, frozenset[str]]
) -> str | None:
    """Why an assignment (GB per pool, ``tags`` every tag its volumes on each pool ask) cannot be
    taken on a host reaching ``pools``, or None: the check the claim and the guard make. Pools in name
    order; the first refusal is named."""
    for name in sorted(assignment):
        pool = pools.get(name)
        if pool is None:
            return f"{STORAGE}: pool {name} not reached by the host"
        if not tags.get(name, frozenset()) <= pool.tags:
            return f"{STORAGE}: pool {name} lacks tags {', '.join(sorted(tags[name] - pool.tags))}"
        if not pool_fits(assignment[name], pool.capacity_gb, pool.allocated_gb):
            return f"{STORAGE}: pool {name} needs {assignment[name]} GB, {pool.free_gb} GB free"
    return None


def reason(volumes: Sequence[VolumeAsk], pools: Iterable[PoolRoom]) -> str:
    """Why the volumes fit none of the host's pools, with the numbers: the first volume that does not
    fit once those before it are placed first fit."""
    ordered = sorted(pools, key=lambda pool: pool.name)
    if not ordered:
        return f"{STORAGE}: the host reaches no storage pool"
    booked: dict[str, int] = {}
    for number, volume in enumerate(volumes, start=1):
        if volume.stays_on is not None:
            if not any(p.shared and p.name == volume.stays_on for p in ordered):
                return f"{STORAGE}: volume {number} stays on shared pool {volume.stays_on}, not reached by the host"
            continue
        pool = next((p for p in ordered if takes(p, volume, booked.get(p.name, 0))), None)
        if pool is None:
            seen = "; ".join(_pool_line(p, booked.get(p.name, 0)) for p in ordered)
            wanted = f" tagged {','.join(sorted(volume.tags))}" if volume.tags else ""
            return f"{STORAGE}: volume {number} ({volume.size_gb} GB{wanted}) fits no pool ({seen})"
        booked[pool.name] = booked.get(pool.name, 0) + volume.size_gb
    raise ValueError("the volumes fit: only a host they do not fit on is explained")


def _pool_line(pool: PoolRoom, booked: int) -> str:
    tags = ",".join(sorted(pool.tags)) or "no tags"
    kind = "shared" if pool.shared else "local"
    return f"{pool.name} {kind} {pool.free_gb - booked} GB free of {pool.capacity_gb}, {tags}"


# -- the same rule in Lua and SQL -------------------------------------------------------------------


def lua_pool_refusal_function() -> str:
    """A Lua function ``pool_refusal(asked, reached)``: ``asked`` a list of ``{name, gb, tags}`` sorted by
    name (tags a list), ``reached`` name -> ``{capacity, allocated, tags}`` (tags a set: tag -> true).
    Returns nil, or the refusal :func:`refusal` gives (its wording too). Pasted into the claim script
    where it says ``{{pool rule}}``."""
    return "\n".join(
        (
            "-- The storage pool rule, rendered from vmsched_domain.storage (do not edit here).",
            "local function pool_refusal(asked, reached)",
            "  for _, a in ipairs(asked) do",
            "    local pool = reached[a.name]",
            "    if not pool then",
            f"      return '{STORAGE}: pool ' .. a.name .. ' not reached by the host'",
            "    end",
            "    local missing = {}",
            "    for _, tag in ipairs(a.tags) do",
            "      if not pool.tags[tag] then",
            "        missing[#missing + 1] = tag",
            "      end",
            "    end",
            "    if #missing > 0 then",
            "      table.sort(missing)",
            f"      return '{STORAGE}: pool ' .. a.name .. ' lacks tags ' .. table.concat(missing, ', ')",
            "    end",
            "    if pool.allocated + a.gb > pool.capacity then",
            f"      return '{STORAGE}: pool ' .. a.name .. ' needs ' .. a.gb .. ' GB, ' ..",
            "        (pool.capacity - pool.allocated) .. ' GB free'",
            "    end",
            "  end",
            "  return nil",
            "end",
        )
    )


def sql_pool_fits(requested: str, capacity: str, allocated: str) -> str:
    """A SQL boolean expression of :func:`pool_fits`, each argument the SQL expression of an amount."""
    return f"({allocated} + {requested} <= {capacity})"
