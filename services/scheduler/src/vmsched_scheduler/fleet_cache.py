"""The scheduler's in-memory copy of the Redis snapshot, kept fresh incrementally.

A full read of 10,000 host hashes costs hundreds of milliseconds; the change feed (``p:changed``
scored by a global change number) lets each refresh read only the hosts touched since the last one.

Refreshes are single-flight: a scheduler handles dozens of messages at once, and without the lock
each of them would issue its own read of the same changes (and, every ``full_refresh_every``, its
own full read of the fleet). A caller that waited while another refresh ran, started after it
asked, takes that refresh's result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping

from vmsched_common.logs import get_logger
from vmsched_common.messages import Resources
from vmsched_common.snapshot import OwnChange, Snapshot, SnapshotHost
from vmsched_scheduler.placement import Demand, Fleet, HostState

log = get_logger(__name__)


def to_host_state(record: SnapshotHost) -> HostState:
    return HostState(
        id=record.id,
        # A hash without allocations (a flush, then a heartbeat before reconciliation) cannot be
        # claimed on: not "online" to the engine either, so it is not chosen in vain.
        status=record.status if record.synced else "unsynced",
        labels=dict(record.labels),
        capacity=demand_of(record.capacity),
        allocated=demand_of(record.allocated),
        reserved=demand_of(record.reserved),
        vm_count=record.vm_count,
        scheduling_paused=record.scheduling_paused,
        last_heartbeat=record.last_heartbeat,
        cpu_ratio=record.overcommit.cpu,
        memory_ratio=record.overcommit.memory,
        disk_ratio=record.overcommit.disk,
    )


def demand_of(resources: Resources) -> Demand:
    return Demand(cpu=resources.cpu, memory_mb=resources.memory_mb, disk_gb=resources.disk_gb, gpu=resources.gpu)


class FleetCache:
    def __init__(self, snapshot: Snapshot, *, full_refresh_every: float, min_refresh_interval: float = 0.0) -> None:
        self.snapshot = snapshot
        self.fleet = Fleet.from_hosts([])
        self._seq = -1
        self._full_refresh_every = full_refresh_every
        self._min_refresh_interval = min_refresh_interval
        # Monotonic times at which the last full and the last refresh of any kind began.
        self._last_full = float("-inf")
        self._last_refresh = float("-inf")
        self._lock = asyncio.Lock()
        self._booked: dict[str, OwnChange] = {}

    def booked(self, changes: Mapping[str, OwnChange]) -> None:
        """The caller booked these claims on :attr:`fleet` as it made them: the next refresh skips
        the hosts whose last change they are."""
        self._booked.update(changes)

    async def refresh(self, *, force_full: bool = False) -> None:
        asked = time.monotonic()
        async with self._lock:
            if self._last_refresh >= asked and (not force_full or self._last_full >= asked):
                return  # a refresh that began after this call was made has just finished
            now = time.monotonic()
            if force_full or self._seq < 0 or now - self._last_full >= self._full_refresh_every:
                await self._full(now)
            elif now - self._last_refresh >= self._min_refresh_interval:
                await self._incremental(now)

    async def _incremental(self, began: float) -> None:
        seq, changed = await self.snapshot.changed_since(self._seq)
        own, self._booked = self._booked, {}
        # A host whose last change is a claim this copy booked, made when it had seen every change
        # before it, is what this copy already holds: no need to read it again.
        stale = [
            host_id
            for host_id, at in changed.items()
            if not ((mine := own.get(host_id)) is not None and mine.seq == at and mine.before <= self._seq)
        ]
        if stale:
            records = await self.snapshot.read_hosts(stale)
            for host_id, record in records.items():
                if record is None:
                    self.fleet.remove(host_id)
                else:
                    self.fleet.upsert(to_host_state(record))
        # A Redis flush resets the change counter: start over from a full read.
        if seq < self._seq or (not changed and await self.snapshot.current_seq() < self._seq):
            await self._full(began)
            return
        self._seq = seq
        self._last_refresh = began

    async def _full(self, began: float) -> None:
        seq, records = await self.snapshot.read_all()
        self.fleet = Fleet.from_hosts(to_host_state(record) for record in records.values())
        self._seq = seq
        self._last_full = self._last_refresh = began
        log.debug("snapshot reloaded", hosts=len(records), seq=seq)

    async def reread(self, host_ids: Iterable[str]) -> None:
        """Read these hosts again, in one round trip: a claim proved the copy of them stale."""
        wanted = sorted(set(host_ids))
        if not wanted:
            return
        for host_id, record in (await self.snapshot.read_hosts(wanted)).items():
            if record is None:
                self.fleet.remove(host_id)
            else:
                self.fleet.upsert(to_host_state(record))
