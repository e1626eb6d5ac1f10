"""The scheduler's in-memory copy of the Redis snapshot, kept fresh incrementally.

A full read of 10,000 host hashes costs hundreds of milliseconds; the change feed (``p:changed``
scored by a global change number) lets each refresh read only the hosts touched since the last one.
The full read, a safety net against a change the feed missed, runs beside the rounds
(:meth:`FleetCache.reload_forever`), in slices that let them go on, and the copy it builds replaces
the old one between two of a round's steps: no round waits for it.

Refreshes are single-flight: a scheduler handles dozens of messages at once, and without the lock
each of them would issue its own read of the same changes. A caller that waited while another
refresh ran, started after it asked, takes that refresh's result.

Every read of a host goes through the :class:`UsageCadence`: the copy takes a host's new measured
usage at most once per ``usage_refresh_interval`` (VMSCHED_USAGE_REFRESH_INTERVAL), whatever else
about the host it takes at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping

from vmsched_placement import Fleet
from vmsched_placement.model import HostState
from vmsched_redis.claims import OwnChange
from vmsched_redis.engine_inputs import to_host_state
from vmsched_redis.host_hash import SnapshotHost
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.usage_cadence import UsageCadence

log = get_logger(__name__)


class FleetCache:
    def __init__(
        self, snapshot: Snapshot, *, min_refresh_interval: float = 0.0, usage_refresh_interval: float = 0.0
    ) -> None:
        self.snapshot = snapshot
        self._usage = UsageCadence(usage_refresh_interval)
        self.fleet = Fleet.from_hosts([])
        self._seq = -1
        self._min_refresh_interval = min_refresh_interval
        # Monotonic times at which the last full and the last refresh of any kind began.
        self._last_full = float("-inf")
        self._last_refresh = float("-inf")
        self._lock = asyncio.Lock()
        self._booked: dict[str, OwnChange] = {}
        self._hosts_read = 0  # hosts read by refreshes so far: whether a refresh brought anything

    def booked(self, changes: Mapping[str, OwnChange], *, on: Fleet) -> None:
        """The caller booked these claims on ``on`` as it made them: if that is still :attr:`fleet`
        (no full read replaced it meanwhile), the next refresh skips the hosts whose last change
        they are."""
        if on is self.fleet:
            self._booked.update(changes)

    async def refresh(self, *, force_full: bool = False) -> None:
        """What changed since the last refresh; the whole fleet the first time, when asked, or after
        Redis lost its change counter (a flush)."""
        asked = time.monotonic()
        async with self._lock:
            if self._last_refresh >= asked and (not force_full or self._last_full >= asked):
                return  # a refresh that began after this call was made has just finished
            now = time.monotonic()
            if force_full or self._seq < 0:
                self._replace(*await self._read_whole(), now)
            elif now - self._last_refresh >= self._min_refresh_interval:
                await self._incremental(now)

    async def catch_up(self) -> bool:
        """Read what changed since the last refresh now, however recent that was (the minimum
        interval is for the rounds' refreshes; this is for a round about to say that no host fits);
        whether anything did, besides this copy's own claims."""
        async with self._lock:
            before = self._hosts_read
            if self._seq < 0:
                self._replace(*await self._read_whole(), time.monotonic())
            else:
                await self._incremental(time.monotonic())
            return self._hosts_read != before

    async def reload(self) -> None:
        """Read the whole fleet into a new copy while rounds go on with the old one, then swap."""
        began = time.monotonic()
        seq, fleet = await self._read_whole()
        async with self._lock:
            self._replace(seq, fleet, began)

    async def reload_forever(self, every: float) -> None:
        """:meth:`reload` every ``every`` seconds."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.reload()
            except Exception as error:  # Redis away: the next period tries again; rounds go on incrementally
                log.warning("full snapshot read failed", error=repr(error))

    async def _read_whole(self) -> tuple[int, Fleet]:
        seq, records = await self.snapshot.read_all()
        now = time.monotonic()
        self._usage.retain(records)
        fleet = Fleet.from_hosts(self._as_read(record, now) for record in records.values())
        fleet.set_shared_pools(await self.snapshot.shared_pools())
        return seq, fleet

    def _as_read(self, record: SnapshotHost, now: float) -> HostState:
        """The engine's view of a host just read: all of it, but the usage at the cadence's pace."""
        return self._usage.keep(to_host_state(record), now)

    def _take(self, records: Mapping[str, SnapshotHost | None]) -> None:
        """Fold hosts just read into the copy: None is a host gone."""
        now = time.monotonic()
        for host_id, record in records.items():
            if record is None:
                self.fleet.remove(host_id)
                self._usage.forget(host_id)
            else:
                self.fleet.upsert(self._as_read(record, now))

    def _replace(self, seq: int, fleet: Fleet, began: float) -> None:
        """Take ``fleet``, read whole at change number ``seq`` or later. What changed after ``seq`` is
        read again at the next refresh, bookings made on the old copy included (forgotten here)."""
        self.fleet = fleet
        self._seq = seq
        self._booked = {}
        self._hosts_read += len(fleet)
        self._last_full = self._last_refresh = began
        log.debug("snapshot reloaded", hosts=len(fleet), seq=seq)

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
            self._take(await self.snapshot.read_hosts(stale))
            self._hosts_read += len(stale)
        # A Redis flush resets the change counter: start over from a full read.
        if seq < self._seq or (not changed and await self.snapshot.current_seq() < self._seq):
            self._replace(*await self._read_whole(), began)
            return
        self._seq = seq
        self._last_refresh = began
        # Shared storage pools are counted apart from hosts (one small hash): read whole each time.
        self.fleet.set_shared_pools(await self.snapshot.shared_pools())

    async def reread(self, host_ids: Iterable[str]) -> None:
        """Read these hosts again, in one round trip, and the shared storage pools in another: a claim
        proved the copy of them stale (a claim refused for a full shared pool names its host)."""
        wanted = sorted(set(host_ids))
        if not wanted:
            return
        self._take(await self.snapshot.read_hosts(wanted))
        self.fleet.set_shared_pools(await self.snapshot.shared_pools())
