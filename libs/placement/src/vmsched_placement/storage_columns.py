"""The fleet's storage pools in columns, for the ``storage`` filter (vmsched_domain.storage's rule).

Per pool name any host reaches: what each host sees free on it (its own local pool's free space, or
the shared pool's, counted once for every host that reaches it) and the code of its tags (0: the host
does not reach it). Most VMs ask no volumes, so the columns are built only once one does, then kept
current: a host update marks its row to be read again, a shared pool's change rewrites the rows of
the hosts that reach it. Hosts coming or going rebuild them at the next question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from vmsched_domain.storage import PoolRoom, VolumeAsk, assign_volumes
from vmsched_placement.model import HostState

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
CodeArray = npt.NDArray[np.int32]

UNREACHED = 0  # the tag code of a pool the host does not reach


@dataclass(slots=True)
class _PoolColumn:
    free: FloatArray  # GB free as the host sees it (0 where unreached)
    tags: CodeArray  # index into StorageColumns.tag_sets; UNREACHED where the host does not reach it
    shared: BoolArray  # the host reaches it as a shared pool
    has_local: bool = False  # some host has a local pool of this name (else: one shared pool for all)


class StorageColumns:
    """The pool columns of one fleet's hosts (``hosts`` is the fleet's own list, kept in order by it)."""

    __slots__ = ("_columns", "_dirty", "_tag_codes", "hosts", "shared", "tag_sets")

    def __init__(self, hosts: Sequence[HostState], shared: Mapping[str, PoolRoom] | None = None) -> None:
        self.hosts = hosts
        self.shared: dict[str, PoolRoom] = dict(shared or {})
        self.tag_sets: list[frozenset[str] | None] = [None]  # code 0: unreached
        self._tag_codes: dict[frozenset[str], int] = {}
        self._columns: dict[str, _PoolColumn] | None = None
        self._dirty: set[int] = set()

    # -- what the fleet tells it -------------------------------------------------------------------
    def row_changed(self, index: int) -> None:
        if self._columns is not None:
            self._dirty.add(index)

    def rows_moved(self) -> None:
        """Hosts were inserted or deleted: rebuild at the next question."""
        self._columns = None
        self._dirty.clear()

    def set_shared(self, pools: Mapping[str, PoolRoom]) -> None:
        """The shared pools as the snapshot holds them now (capacity, tags, allocated)."""
        changed = [name for name in set(pools) | set(self.shared) if pools.get(name) != self.shared.get(name)]
        self.shared = dict(pools)
        for name in changed:
            self._shared_changed(name)

    def book_shared(self, name: str, gb: int) -> None:
        """``gb`` more (or less, negative) allocated on a shared pool (a claim made or given back)."""
        pool = self.shared.get(name)
        if pool is not None:
            self.shared[name] = replace(pool, allocated_gb=max(0, pool.allocated_gb + gb))
            self._shared_changed(name)

    # -- what a decision asks ----------------------------------------------------------------------
    def rooms(self, host: HostState) -> list[PoolRoom]:
        """The pools ``host`` reaches, shared ones with the shared state (none known: no room)."""
        return [self._resolved(pool) for pool in host.storage_pools]

    def assignment(self, index: int, volumes: Sequence[VolumeAsk]) -> tuple[str, ...] | None:
        return assign_volumes(volumes, self.rooms(self.hosts[index]))

    def mask(self, volumes: Sequence[VolumeAsk]) -> BoolArray:
        """Which hosts take every volume, first fit (vmsched_domain.storage.assign_volumes, vectorised)."""
        columns = self._current()
        count = len(self.hosts)
        fits: BoolArray = np.ones(count, dtype=np.bool_)
        left: dict[str, FloatArray] = {}  # per host, what is free once this VM's earlier volumes are on it
        last = len(volumes) - 1
        for position, volume in enumerate(volumes):
            if volume.stays_on is not None:
                # A migrating VM's shared volume stays: the host must reach that pool, as shared.
                column = columns.get(volume.stays_on)
                fits &= column.shared if column is not None else False
                continue
            placed: BoolArray = np.zeros(count, dtype=np.bool_)
            judged = np.fromiter(
                (tags is not None and volume.tags <= tags for tags in self.tag_sets), np.bool_, len(self.tag_sets)
            )
            # Which pool a host took matters only for the volumes after this one (``left``): for the
            # last, whether some pool takes it is enough, and no pool's answer need exclude another's.
            booking = position < last
            for name, column in columns.items():  # in name order: first fit
                if not column.has_local and name not in left:
                    # One shared pool, the same for every host that reaches it: one look decides.
                    room = self.shared.get(name)
                    if room is None or room.free_gb < volume.size_gb or not volume.tags <= room.tags:
                        continue
                    takes = column.shared
                else:
                    takes = judged[column.tags] & np.greater_equal(left.get(name, column.free), volume.size_gb)
                if booking:
                    takes = takes & ~placed
                    left[name] = left.get(name, column.free) - volume.size_gb * takes
                placed |= takes
            fits &= placed
            if not fits.any():
                break
        return fits

    # -- building and keeping the columns ----------------------------------------------------------
    def _resolved(self, pool: PoolRoom) -> PoolRoom:
        if not pool.shared:
            return pool
        return self.shared.get(pool.name) or PoolRoom(pool.name, True, 0, 0)

    def _code(self, tags: frozenset[str]) -> int:
        code = self._tag_codes.get(tags)
        if code is None:
            code = self._tag_codes[tags] = len(self.tag_sets)
            self.tag_sets.append(tags)
        return code

    def _current(self) -> dict[str, _PoolColumn]:
        if self._columns is None:
            self._columns = self._build()
            self._dirty.clear()
        elif self._dirty:
            dirty, self._dirty = self._dirty, set()
            for index in dirty:
                if not self._write_row(self._columns, index):
                    self._columns = self._build()
                    break
        return self._columns

    def _build(self) -> dict[str, _PoolColumn]:
        count = len(self.hosts)
        names = sorted({pool.name for host in self.hosts for pool in host.storage_pools})  # dicts keep this order
        columns = {
            name: _PoolColumn(
                np.zeros(count, dtype=np.float64), np.zeros(count, dtype=np.int32), np.zeros(count, dtype=np.bool_)
            )
            for name in names
        }
        for index in range(count):
            self._write_row(columns, index)
        return columns

    def _write_row(self, columns: dict[str, _PoolColumn], index: int) -> bool:
        """Row ``index`` from its host; False when it names a pool no column has (rebuild)."""
        reached = {pool.name: pool for pool in self.hosts[index].storage_pools}
        if any(name not in columns for name in reached):
            return False
        for name, column in columns.items():
            pool = reached.get(name)
            if pool is None:
                column.free[index], column.tags[index], column.shared[index] = 0.0, UNREACHED, False
                continue
            room = self._resolved(pool)
            column.has_local = column.has_local or not pool.shared
            column.free[index] = float(room.free_gb)
            column.tags[index] = self._code(room.tags)
            column.shared[index] = pool.shared
        return True

    def _shared_changed(self, name: str) -> None:
        if self._columns is None or name not in self._columns:
            return
        column = self._columns[name]
        room = self.shared.get(name) or PoolRoom(name, True, 0, 0)
        column.free[column.shared] = float(room.free_gb)
        column.tags[column.shared] = self._code(room.tags)


def booked_pools(host: HostState, storage: StorageColumns, pools: Mapping[str, int], sign: int) -> HostState:
    """``host`` with ``sign`` x ``pools`` (GB per pool) booked: on its local pools, and on the shared ones."""
    if not pools:
        return host
    local = {p.name: p for p in host.storage_pools if not p.shared}
    for name, gb in pools.items():
        if name in local:
            pool = local[name]
            local[name] = replace(pool, allocated_gb=max(0, pool.allocated_gb + sign * gb))
        else:
            storage.book_shared(name, sign * gb)
    return replace(host, storage_pools=tuple(local.get(p.name, p) for p in host.storage_pools))
