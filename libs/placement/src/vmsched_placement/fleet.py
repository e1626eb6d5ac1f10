"""The fleet in columns: one numpy array per host attribute, index i = the i-th host in id order.

Filters and scorers read whole columns at once, so a decision over 10,000 hosts is a handful of
vectorised operations instead of a Python loop. Hosts stay sorted by id, so "the first index" is
also "the lowest host id": ``argmin`` and ``flatnonzero`` break ties by host id for free.

Updating one known host rewrites one row in place; adding or removing a host shifts the columns
(O(n) memmove, rare: hosts come and go far less often than they heartbeat).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

from vmsched_domain.storage import PoolRoom
from vmsched_placement.column_block import ColumnBlock
from vmsched_placement.host_keys import HostKeys
from vmsched_placement.model import GPU, ONLINE, Demand, HostState
from vmsched_placement.scratch import Scratch
from vmsched_placement.storage_columns import StorageColumns, booked_pools
from vmsched_placement.taint_rules import NO_SCHEDULE, PREFER_NO_SCHEDULE, Taint, Toleration, untolerated

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
CodeArray = npt.NDArray[np.int32]

# Label keys whose value columns are kept; the oldest is dropped beyond this (each costs 4n bytes
# and one assignment per host update).
MAX_INDEXED_LABEL_KEYS = 64
# The code of "this host has no such label" in a label key's column.
NO_LABEL = -1
# Up to this many values, "one of these values" is a few comparisons; beyond, one np.isin.
SMALL_VALUE_SET = 4

# Adding more hosts than this share of the fleet in one batch rebuilds the columns instead.
REBUILD_SHARE = 0.125


ColumnT = TypeVar("ColumnT", bound=npt.NDArray[Any], covariant=True)


class DerivedColumn(Protocol[ColumnT]):
    """A column computed from the others that many decisions in a row read unchanged (a score that
    does not depend on the VM, the availability of every host at one instant): the fleet keeps it,
    rewrites the one row a host update touches, and drops it when hosts come or go."""

    @property
    def key(self) -> Hashable:
        """What the column depends on besides the fleet (weights, an instant); a new key replaces
        the kept column of the same kind."""
        ...

    def compute(self, columns: FleetColumns) -> ColumnT:
        """The whole column (a fresh array)."""
        ...

    def row(self, columns: FleetColumns, index: int) -> float | bool:
        """Row ``index`` of the column, by the same arithmetic as ``compute`` (bit-identical)."""
        ...


class FleetColumns:
    """The arrays filters and strategies read. Treat every array as read-only outside ``Fleet``.

    Resource columns are float64 (whole numbers, exact below 2**53; float comparisons are several
    times faster than int64 ones in numpy) of shape (4, n), rows ``CPU, MEMORY, DISK, GPU``:
    ``effective`` (capacity after overcommit), ``allocated``, ``free`` (effective - allocated),
    ``divisor`` (effective as float, at least 1: what shares are computed against) and
    ``utilisation`` (allocated / divisor). ``load`` (2, n), rows ``CPU, MEMORY``: what is in use as a
    share of the host, measured (:attr:`HostState.measured_load`) where the agent reports usage, else
    the ``utilisation`` row.

    Taints: most hosts have none, so each host's list of taints is interned (``taint_codes``, an
    index into ``taint_sets``, 0 for none) and two flags per host say whether it has any taint of
    each effect; ``has_gpus`` says which hosts have GPUs to give VMs. ``no_schedule_hosts``,
    ``prefer_no_schedule_hosts`` and ``gpu_hosts`` count the hosts of each kind, so that a rule with
    nothing to say about this fleet costs nothing.
    """

    __slots__ = (
        "_derived",
        "_taint_set_codes",
        "allocated",
        "divisor",
        "effective",
        "extra_free_columns",
        "free",
        "gpu_hosts",
        "has_gpus",
        "hosts",
        "ids",
        "keys",
        "label_codes",
        "label_values",
        "last_heartbeat",
        "load",
        "no_schedule",
        "no_schedule_hosts",
        "online",
        "paused",
        "prefer_no_schedule",
        "prefer_no_schedule_hosts",
        "scratch",
        "storage",
        "taint_codes",
        "taint_sets",
        "touched",
        "utilisation",
    )

    def __init__(self, hosts: Sequence[HostState], shared_pools: Mapping[str, PoolRoom] | None = None) -> None:
        self.hosts: list[HostState] = list(hosts)
        self.storage = StorageColumns(self.hosts, shared_pools)
        self.ids: list[str] = [host.id for host in self.hosts]
        block = ColumnBlock(self.hosts)
        self.online: BoolArray = block.online
        self.last_heartbeat: FloatArray = block.last_heartbeat
        self.paused: BoolArray = block.paused
        self.effective: FloatArray = block.effective
        self.allocated: FloatArray = block.allocated
        self.free: FloatArray = block.free
        self.divisor: FloatArray = block.divisor
        self.utilisation: FloatArray = block.utilisation
        self.load: FloatArray = block.load
        # Per label key asked about: each host's value as a small integer code (interned in
        # ``label_values``), so "carries key=value" is one vectorised comparison.
        self.label_codes: dict[str, CodeArray] = {}
        self.label_values: dict[str, dict[str, int]] = {}
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_set_codes: dict[tuple[Taint, ...], int] = {(): 0}
        self.taint_codes, self.no_schedule, self.prefer_no_schedule = self._taint_columns(self.hosts)
        self._count()
        self.keys = HostKeys(self.hosts)  # networks, dedication: few distinct values, interned
        # Per named extra resource asked about: what each host has free of it (0 where it has none).
        # Most hosts have no extras and most VMs ask none, so these exist only once asked for.
        self.extra_free_columns: dict[str, FloatArray] = {}
        # Per kind of derived column: the one kept, with its spec (see ``derived``).
        self._derived: dict[type, tuple[DerivedColumn[npt.NDArray[Any]], npt.NDArray[Any]]] = {}
        self.scratch = Scratch(len(self.ids))
        # Ids of the hosts written, inserted or deleted since the decision journal last took them
        # (vmsched_placement.journal): it then encodes those alone. Bounded by the fleet's ids.
        self.touched: set[str] = set()

    def __len__(self) -> int:
        return len(self.ids)

    def index_of(self, host_id: str) -> int | None:
        """The row of a host, or None when the fleet does not know it."""
        index = bisect_left(self.ids, host_id)
        if index < len(self.ids) and self.ids[index] == host_id:
            return index
        return None

    def label_mask(self, key: str, value: str) -> BoolArray:
        """Which hosts carry the label ``key=value`` (a fresh array).

        The first question about a key reads every host's labels once; after that the key's value
        column is kept current by every fleet update.
        """
        codes, values = self.label_column(key)
        code = values.get(value)
        if code is None:
            return np.zeros(len(self.hosts), dtype=np.bool_)
        mask: BoolArray = np.equal(codes, code)
        return mask

    def label_in_mask(self, key: str, values: Iterable[str]) -> BoolArray:
        """Which hosts carry the label ``key`` with one of ``values`` (a fresh array)."""
        codes, interned = self.label_column(key)
        wanted = [interned[value] for value in set(values) if value in interned]
        if not wanted:
            return np.zeros(len(self.hosts), dtype=np.bool_)
        mask: BoolArray
        if len(wanted) <= SMALL_VALUE_SET:
            mask = np.equal(codes, wanted[0])
            for code in wanted[1:]:
                np.logical_or(mask, np.equal(codes, code), out=mask)
        else:
            mask = np.isin(codes, wanted)
        return mask

    def untolerated_mask(self, tolerations: Sequence[Toleration], effect: str) -> BoolArray:
        """Which hosts carry a taint of ``effect`` that none of ``tolerations`` tolerates (a fresh
        array): judged once per distinct set of taints in the fleet (a handful), spread to the hosts
        by their set's code."""
        judged = np.fromiter(
            (bool(untolerated(taints, tolerations, effect)) for taints in self.taint_sets),
            np.bool_,
            len(self.taint_sets),
        )
        by_host: BoolArray = judged[self.taint_codes]
        return by_host

    def label_key_mask(self, key: str) -> BoolArray:
        """Which hosts carry the label ``key``, whatever its value (a fresh array)."""
        codes, _ = self.label_column(key)
        mask: BoolArray = np.not_equal(codes, NO_LABEL)
        return mask

    def label_column(self, key: str) -> tuple[CodeArray, dict[str, int]]:
        """Each host's value of label ``key`` as a code (``NO_LABEL`` where it has none), and the
        code of each value seen: read from every host's labels the first time a key is asked about,
        then kept current by every fleet update. Read-only for the caller."""
        codes = self.label_codes.get(key)
        if codes is None:
            codes = np.fromiter((self._code(key, h.labels.get(key)) for h in self.hosts), np.int32, len(self.hosts))
            if len(self.label_codes) >= MAX_INDEXED_LABEL_KEYS:
                oldest = next(iter(self.label_codes))
                del self.label_codes[oldest]
                self.label_values.pop(oldest, None)
            self.label_codes[key] = codes
        return codes, self.label_values.setdefault(key, {})

    def _taint_code(self, taints: tuple[Taint, ...]) -> int:
        code = self._taint_set_codes.get(taints)
        if code is None:
            code = self._taint_set_codes[taints] = len(self.taint_sets)
            self.taint_sets.append(taints)
        return code

    def _taint_columns(self, hosts: Sequence[HostState]) -> tuple[CodeArray, BoolArray, BoolArray]:
        count = len(hosts)
        codes = np.fromiter((self._taint_code(host.taints) for host in hosts), np.int32, count)
        no_schedule = np.fromiter((_has(host.taints, NO_SCHEDULE) for host in hosts), np.bool_, count)
        prefer = np.fromiter((_has(host.taints, PREFER_NO_SCHEDULE) for host in hosts), np.bool_, count)
        return codes, no_schedule, prefer

    def _count(self) -> None:
        self.has_gpus: BoolArray = np.greater(self.effective[GPU], 0.0)
        self.no_schedule_hosts = int(np.count_nonzero(self.no_schedule))
        self.prefer_no_schedule_hosts = int(np.count_nonzero(self.prefer_no_schedule))
        self.gpu_hosts = int(np.count_nonzero(self.has_gpus))

    def extra_free(self, name: str) -> FloatArray:
        """What every host has free of the named extra resource (read-only; kept current by every
        fleet update once asked for)."""
        column = self.extra_free_columns.get(name)
        if column is None:
            column = np.fromiter((_extra_free(h, name) for h in self.hosts), np.float64, len(self.hosts))
            self.extra_free_columns[name] = column
        return column

    def derived(self, spec: DerivedColumn[ColumnT]) -> ColumnT:
        """``spec``'s column (read-only): computed once, then kept current row by row by every host
        update until a spec of the same kind (class) with another key asks."""
        kept = self._derived.get(type(spec))
        if kept is not None and kept[0].key == spec.key:
            return cast(ColumnT, kept[1])
        column = spec.compute(self)
        self._derived[type(spec)] = (spec, column)
        return column

    def _code(self, key: str, value: str | None) -> int:
        if value is None:
            return NO_LABEL
        values = self.label_values.setdefault(key, {})
        return values.setdefault(value, len(values))

    def write_row(self, index: int, host: HostState) -> None:
        """Overwrite row ``index`` with ``host`` (same id or its replacement at the same position)."""
        effective = host.effective_capacity.as_tuple()
        allocated = host.allocated.as_tuple()
        divisor = tuple(float(max(amount, 1)) for amount in effective)
        no_schedule, prefer = _has(host.taints, NO_SCHEDULE), _has(host.taints, PREFER_NO_SCHEDULE)
        self.no_schedule_hosts += int(no_schedule) - int(self.no_schedule[index])
        self.prefer_no_schedule_hosts += int(prefer) - int(self.prefer_no_schedule[index])
        self.gpu_hosts += int(effective[GPU] > 0) - int(self.has_gpus[index])
        self.has_gpus[index] = effective[GPU] > 0
        self.no_schedule[index], self.prefer_no_schedule[index] = no_schedule, prefer
        self.taint_codes[index] = self._taint_code(host.taints)
        self.keys.write(index, host)
        self.touched.add(host.id)
        self.hosts[index] = host
        self.storage.row_changed(index)
        self.ids[index] = host.id
        self.online[index] = host.status == ONLINE
        self.last_heartbeat[index] = host.last_heartbeat
        self.paused[index] = host.scheduling_paused
        self.effective[:, index] = effective
        self.allocated[:, index] = allocated
        self.free[:, index] = tuple(e - a for e, a in zip(effective, allocated, strict=True))
        self.divisor[:, index] = divisor
        self.utilisation[:, index] = tuple(float(a) / d for a, d in zip(allocated, divisor, strict=True))
        measured = host.measured_load
        self.load[:, index] = self.utilisation[:2, index] if measured is None else measured
        for key, codes in self.label_codes.items():
            codes[index] = self._code(key, host.labels.get(key))
        for name, column in self.extra_free_columns.items():
            column[index] = _extra_free(host, name)
        for spec, derived in self._derived.values():
            derived[index] = spec.row(self, index)

    def insert_rows(self, new_hosts: Sequence[HostState]) -> None:
        """Insert hosts whose ids are not in the fleet; ``new_hosts`` must be sorted by id."""
        positions = [bisect_left(self.ids, host.id) for host in new_hosts]
        self.touched.update(host.id for host in new_hosts)
        for position, host in zip(reversed(positions), reversed(new_hosts), strict=True):
            self.ids.insert(position, host.id)
            self.hosts.insert(position, host)
        self.storage.rows_moved()
        block = ColumnBlock(new_hosts)
        self.online = np.insert(self.online, positions, block.online)
        self.last_heartbeat = np.insert(self.last_heartbeat, positions, block.last_heartbeat)
        self.paused = np.insert(self.paused, positions, block.paused)
        self.effective = np.insert(self.effective, positions, block.effective, axis=1)
        self.allocated = np.insert(self.allocated, positions, block.allocated, axis=1)
        self.free = np.insert(self.free, positions, block.free, axis=1)
        self.divisor = np.insert(self.divisor, positions, block.divisor, axis=1)
        self.utilisation = np.insert(self.utilisation, positions, block.utilisation, axis=1)
        self.load = np.insert(self.load, positions, block.load, axis=1)
        for key, codes in self.label_codes.items():
            carried = [self._code(key, host.labels.get(key)) for host in new_hosts]
            self.label_codes[key] = np.insert(codes, positions, carried)
        taint_codes, no_schedule, prefer = self._taint_columns(new_hosts)
        self.taint_codes = np.insert(self.taint_codes, positions, taint_codes)
        self.no_schedule = np.insert(self.no_schedule, positions, no_schedule)
        self.prefer_no_schedule = np.insert(self.prefer_no_schedule, positions, prefer)
        self._count()
        self.keys.insert(positions, new_hosts)
        for name, column in self.extra_free_columns.items():
            self.extra_free_columns[name] = np.insert(column, positions, [_extra_free(h, name) for h in new_hosts])
        self._derived.clear()
        self.scratch = Scratch(len(self.ids))

    def delete_row(self, index: int) -> None:
        self.touched.add(self.ids[index])
        del self.ids[index]
        del self.hosts[index]
        self.storage.rows_moved()
        self.online = np.delete(self.online, index)
        self.last_heartbeat = np.delete(self.last_heartbeat, index)
        self.paused = np.delete(self.paused, index)
        self.effective = np.delete(self.effective, index, axis=1)
        self.allocated = np.delete(self.allocated, index, axis=1)
        self.free = np.delete(self.free, index, axis=1)
        self.divisor = np.delete(self.divisor, index, axis=1)
        self.utilisation = np.delete(self.utilisation, index, axis=1)
        self.load = np.delete(self.load, index, axis=1)
        for key, codes in self.label_codes.items():
            self.label_codes[key] = np.delete(codes, index)
        self.taint_codes = np.delete(self.taint_codes, index)
        self.no_schedule = np.delete(self.no_schedule, index)
        self.prefer_no_schedule = np.delete(self.prefer_no_schedule, index)
        self._count()
        self.keys.delete(index)
        for name, column in self.extra_free_columns.items():
            self.extra_free_columns[name] = np.delete(column, index)
        self._derived.clear()
        self.scratch = Scratch(len(self.ids))


def _extra_free(host: HostState, name: str) -> float:
    """Capacity minus allocation of one named extra resource (never overcommitted, nothing reserved)."""
    return float(dict(host.capacity.extra).get(name, 0) - dict(host.allocated.extra).get(name, 0))


def _has(taints: tuple[Taint, ...], effect: str) -> bool:
    return any(taint.effect == effect for taint in taints)


class Fleet:
    """The scheduler's mutable, columnar view of every known host, kept sorted by host id."""

    __slots__ = ("_columns",)

    def __init__(self, columns: FleetColumns) -> None:
        self._columns = columns

    @classmethod
    def from_hosts(cls, hosts: Iterable[HostState]) -> Fleet:
        """A fleet of these hosts; when an id repeats, the last state wins."""
        by_id = {host.id: host for host in hosts}
        return cls(FleetColumns([by_id[host_id] for host_id in sorted(by_id)]))

    @property
    def columns(self) -> FleetColumns:
        """The arrays filters and strategies read (valid until the next update of the fleet)."""
        return self._columns

    def __len__(self) -> int:
        return len(self._columns)

    def __iter__(self) -> Iterator[HostState]:
        return iter(tuple(self._columns.hosts))

    def __contains__(self, host_id: object) -> bool:
        return isinstance(host_id, str) and self._columns.index_of(host_id) is not None

    @property
    def host_ids(self) -> tuple[str, ...]:
        return tuple(self._columns.ids)

    def host(self, host_id: str) -> HostState | None:
        """The current state of one host, None if unknown."""
        index = self._columns.index_of(host_id)
        return None if index is None else self._columns.hosts[index]

    def host_at(self, index: int) -> HostState:
        """The host in row ``index`` of the columns."""
        return self._columns.hosts[index]

    def index_of(self, host_id: str) -> int | None:
        return self._columns.index_of(host_id)

    def upsert(self, host: HostState) -> None:
        """Add a host or replace its state. O(1) for a known host, O(n) memmove for a new one."""
        index = self._columns.index_of(host.id)
        if index is None:
            self._columns.insert_rows([host])
        else:
            self._columns.write_row(index, host)

    def upsert_many(self, hosts: Iterable[HostState]) -> None:
        """``upsert`` for a batch; new hosts are inserted in one pass (or the columns rebuilt)."""
        new: dict[str, HostState] = {}
        for host in hosts:
            index = self._columns.index_of(host.id)
            if index is None:
                new[host.id] = host
            else:
                self._columns.write_row(index, host)
        if not new:
            return
        if len(new) > REBUILD_SHARE * len(self._columns):
            merged = {host.id: host for host in self._columns.hosts}
            merged.update(new)
            shared = self._columns.storage.shared
            self._columns = FleetColumns([merged[host_id] for host_id in sorted(merged)], shared)
        else:
            self._columns.insert_rows([new[host_id] for host_id in sorted(new)])

    def remove(self, host_id: str) -> None:
        """Forget a host; unknown ids are ignored."""
        index = self._columns.index_of(host_id)
        if index is not None:
            self._columns.delete_row(index)

    def allocate(self, host_id: str, demand: Demand, pools: Mapping[str, int] | None = None) -> None:
        """Book a placed VM on a host locally (after a successful claim): adds ``demand`` and one VM,
        and ``pools`` (GB per storage pool its volumes take).

        Unknown hosts are ignored: the next refresh of the snapshot brings the truth.
        """
        index = self._columns.index_of(host_id)
        if index is None:
            return
        host = self._columns.hosts[index]
        host = replace(host, allocated=host.allocated.plus(demand), vm_count=host.vm_count + 1)
        self._columns.write_row(index, booked_pools(host, self._columns.storage, pools or {}, 1))

    def release(self, host_id: str, demand: Demand, pools: Mapping[str, int] | None = None) -> None:
        """Undo ``allocate``: subtracts ``demand`` (never below zero) and one VM. Unknown hosts are ignored."""
        index = self._columns.index_of(host_id)
        if index is None:
            return
        host = self._columns.hosts[index]
        host = replace(host, allocated=host.allocated.minus_floored(demand), vm_count=max(0, host.vm_count - 1))
        self._columns.write_row(index, booked_pools(host, self._columns.storage, pools or {}, -1))

    def set_shared_pools(self, pools: Mapping[str, PoolRoom]) -> None:
        """The shared storage pools as the snapshot holds them now."""
        self._columns.storage.set_shared(pools)
