"""The waker: one scheduler replica at a time (a Redis lease) places waiting VMs when room appears.

PostgreSQL holds the waiting VMs (status ``waiting``, ``wait_until``); the leaseholder keeps them in
memory by shape (:mod:`.index`) and follows the snapshot's change feed, as every scheduler does. A
host whose room grew (a VM released, a host added, back online, unpaused, grown, its reserve or
ratios changed) is tested against each shape's oldest VM only; those some host takes are woken:
waiting -> pending in PostgreSQL, then ``vm.create`` (the outbox's, so the sweeper sends it again
if this process dies first), and the one pipeline places them. Nothing is polled per waiting VM:
the cost of a change is one test per shape. An operator's change to a host (``PATCH /v1/hosts``:
overcommit, reserved, labels, taints, unpause) reaches the change feed like any other and counts
as room that may have appeared.

Shapes of server-group members are the exception: whether a host takes one depends on its group's
members in the host's domain, which a VM released on another host of that domain can change. They
are decided against the whole fleet, with their groups' rules and members (read from the snapshot
once per wake), whenever any host changed; there are as many of them as groups with waiting members,
not as waiting members.

A VM that enters ``waiting`` is learnt from PostgreSQL (the rows updated since the last look), and
its shape is tested at once: room may have appeared while it was being decided. Every
``RESYNC_EVERY`` seconds, and whenever the lease is taken, the whole state is read again from
PostgreSQL and Redis: a waker that crashed loses nothing, the next leaseholder starts from the truth.

Waiting VMs whose ``wait_until`` passed end ``unschedulable`` with their last reason.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_amqp import events
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import VmUnschedulable
from vmsched_domain.records import VmRecord
from vmsched_pg.outbox import publish_rows
from vmsched_placement import DecisionContext, Fleet, HostState, Weights
from vmsched_redis.engine_inputs import to_host_state
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger
from vmsched_scheduler.groups import GroupSource, RoundGroups
from vmsched_scheduler.reserve import ReserveSource, RoundReserve
from vmsched_scheduler.waiting.index import (
    Shape,
    WaitingEntry,
    WaitingIndex,
    room_grew,
    whom_to_wake,
)
from vmsched_scheduler.waiting.lease import Lease
from vmsched_scheduler.waiting.store import WaitingStore

log = get_logger("vmsched_scheduler")

TICK = 0.25  # seconds between two looks at the change feed while holding the lease
CONTEND_EVERY = 1.0  # seconds between two tries to take the lease
LEASE_TTL = 5.0  # a holder silent this long loses the lease
RESYNC_EVERY = 60.0  # the whole state read again (a safety net against a change missed)
EXPIRE_EVERY = 2.0  # the expiry sweep at least this often (besides when the index says one is due)
# Rows are looked for from this much before the newest seen: a transaction's updated_at is its start,
# and one that began earlier may commit later.
ENTERED_OVERLAP = timedelta(seconds=2)


def _entry(vm: VmRecord, now: float) -> WaitingEntry:
    return WaitingEntry(
        since=vm.created_at.timestamp() if vm.created_at else now,
        vm_id=vm.id,
        attempt=vm.attempt,
        vm=vm.to_place(now),
        wait_until=vm.wait_until.timestamp() if vm.wait_until else now,
    )


class Waker:
    def __init__(
        self,
        engine: AsyncEngine,
        snapshot: Snapshot,
        publisher: Publisher,
        *,
        offline_timeout: float,
        weights: Weights,
        groups: GroupSource | None = None,
        clock: Callable[[], float] = time.time,
        reserve: ReserveSource | None = None,
    ) -> None:
        self.engine = engine
        self.store = WaitingStore(engine)
        self.snapshot = snapshot
        self.publisher = publisher
        self.lease = Lease(snapshot.redis, f"{snapshot.prefix}:waker", ttl=LEASE_TTL)
        self.offline_timeout = offline_timeout
        self.weights = weights
        self.groups = groups
        self.clock = clock
        self.reserve = reserve  # the HA reserve: a VM it would refuse is not woken (it would only wait again)
        self.index = WaitingIndex()
        self._rng = random.Random(0)  # unused: the waker's decisions rank by least_loaded
        self.leading = False
        self._fleet = Fleet.from_hosts([])
        self._seq = -1
        self._unread: set[str] = set()
        self._hosts_changed = False  # some host was read from the change feed since the last look
        self._cursor: datetime | None = None
        self._deadlines: list[tuple[float, UUID]] = []
        self._next_resync = 0.0
        self._next_expiry = 0.0

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    await self.tick()
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # a server away: the next tick tries again
                    log.warning("waker tick failed", error=repr(error))
                await asyncio.sleep(TICK if self.leading else CONTEND_EVERY)
        finally:
            if self.leading:
                await asyncio.shield(self.lease.give_up())

    async def tick(self) -> None:
        """One look: hold the lease, learn new waiting VMs and capacity changes, wake and expire."""
        if not await self.lease.hold():
            if self.leading:
                log.info("waker lease lost; another replica wakes waiting VMs")
                self.leading = False
                self.index.clear()
            return
        now = time.monotonic()
        if not self.leading or now >= self._next_resync:
            if not self.leading:
                log.info("waker lease taken; reading the waiting VMs")
            self.leading = True
            await self._load()
            self._next_resync = now + RESYNC_EVERY
            await self._wake(self.index.all_shapes(), self._fleet)
        else:
            # A new VM's shape against every host (room may have appeared while it was decided), once
            # the hosts the change feed names are read: while no VM waited they were left unread, and
            # a copy that old would show room long taken (a wake for nothing, and a wasted attempt)...
            entered = await self._learn_entered()
            grown = await self._read_changes()
            if entered:
                await self._wake(entered, self._fleet)
            # ... and each shape against the hosts whose room grew, those alone: a cheap test...
            if grown:
                changed = Fleet.from_hosts(grown)
                fitting = self.index.shapes_fitting([host.free for host in grown])
                await self._wake([shape for shape in fitting if not shape.needs_whole_fleet], changed)
            # ... but a server group's shape against every host, whenever any changed.
            if self._hosts_changed:
                self._hosts_changed = False
                await self._wake([shape for shape in self.index.all_shapes() if shape.needs_whole_fleet], self._fleet)
        await self._expire()

    # -- state ----------------------------------------------------------------------------------
    async def _load(self) -> None:
        """Everything again, from the truth: every waiting VM, every host."""
        at = self.clock()
        self._cursor = await self.store.now()
        waiting = await self.store.all_waiting()
        self._seq, records = await self.snapshot.read_all()
        self._fleet = Fleet.from_hosts(to_host_state(record) for record in records.values())
        self._fleet.set_shared_pools(await self.snapshot.shared_pools())
        self._unread.clear()
        self.index.clear()
        self._deadlines = []
        for vm in waiting:
            self._index(_entry(vm, at))

    def _index(self, entry: WaitingEntry) -> Shape | None:
        if not self.index.add(entry):
            return None
        heapq.heappush(self._deadlines, (entry.wait_until, entry.vm_id))
        return entry.shape

    async def _learn_entered(self) -> set[Shape]:
        """The VMs that entered ``waiting`` since the last look, indexed; their shapes."""
        assert self._cursor is not None
        entered = await self.store.entered_since(self._cursor - ENTERED_OVERLAP)
        if not entered:
            return set()
        self._cursor = max(self._cursor, max(e.at for e in entered))
        unknown = [e.vm_id for e in entered if (known := self.index.get(e.vm_id)) is None or known.attempt != e.attempt]
        now = self.clock()
        shapes = set()
        for vm in await self.store.rows(unknown):
            shape = self._index(_entry(vm, now))
            if shape is not None:
                shapes.add(shape)
        return shapes

    async def _read_changes(self) -> list[HostState]:
        """Read the hosts the change feed names (only while some VM waits; the others are read once
        one does); those whose room grew.

        Compared with this copy as the waker left it, its own bookings included: a VM it woke that
        was claimed and released again between two looks shows as room grown, as it is. A look
        before the woken VM's claim shows its room as grown too: another wake, decided again by
        the pipeline, which finds the room gone, and the VM waits again."""
        seq, changed = await self.snapshot.changed_since(self._seq)
        if seq < self._seq or (not changed and await self.snapshot.current_seq() < self._seq):
            self._next_resync = 0.0  # Redis lost its change counter (a flush): read everything again
            return []
        self._seq = seq
        self._unread.update(changed)
        if not len(self.index) or not self._unread:
            return []
        wanted, self._unread = sorted(self._unread), set()
        self._hosts_changed = True
        # A claim or release on a shared storage pool names a host on the feed: the pools are read too.
        self._fleet.set_shared_pools(await self.snapshot.shared_pools())
        grown: list[HostState] = []
        for host_id, record in (await self.snapshot.read_hosts(wanted)).items():
            if record is None:
                self._fleet.remove(host_id)
                continue
            state = to_host_state(record)
            if room_grew(self._fleet.host(host_id), state):
                grown.append(state)
            self._fleet.upsert(state)
        return grown

    # -- wake -----------------------------------------------------------------------------------
    def _context(self) -> DecisionContext:
        return DecisionContext(
            now=self.clock(), offline_timeout=self.offline_timeout, weights=self.weights, rng=self._rng
        )

    async def _wake(self, shapes: Iterable[Shape], hosts: Fleet) -> None:
        """Wake the VMs of ``shapes`` some host of ``hosts`` (the fleet, or the hosts that changed)
        takes, oldest first, booked there and on the fleet. One that is no longer waiting (deleted,
        expired meanwhile) gives its booking back and the next of its shape is tried. A server group's
        members are booked in the group's counts (read once here) as they are woken; a stale wake's
        place there is kept, which at worst leaves a member waiting until the next change."""
        pending = set(shapes)
        if not pending:
            return
        groups = await self._groups_of(pending)
        reserve = await RoundReserve.load(self.reserve)
        while pending:
            chosen = whom_to_wake(self.index, hosts, pending, self._context(), groups)
            if reserve is not None:
                kept_out = [w for w in chosen if not reserve.admits(hosts, w.host_id, w.entry.shape.demand.as_tuple())]
                for wake in kept_out:
                    hosts.release(wake.host_id, wake.entry.shape.demand)
                chosen = [w for w in chosen if w not in kept_out]
            if not chosen:
                return
            if hosts is not self._fleet:
                for wake in chosen:
                    self._fleet.allocate(wake.host_id, wake.entry.shape.demand)
            woken = await self.store.wake([(w.entry.vm_id, w.entry.attempt) for w in chosen])
            if woken:
                woken.sort(key=lambda vm: (vm.created_at or datetime.min, vm.id))
                log.info("room appeared: waiting VMs decided again", count=len(woken))
                await publish_rows(self.publisher, self.engine, woken)
            done = {vm.id for vm in woken}
            stale = [w for w in chosen if w.entry.vm_id not in done]
            for wake in stale:
                hosts.release(wake.host_id, wake.entry.shape.demand)
                if hosts is not self._fleet:
                    self._fleet.release(wake.host_id, wake.entry.shape.demand)
            pending = {w.entry.shape for w in stale}

    async def _groups_of(self, shapes: Iterable[Shape]) -> RoundGroups | None:
        """The rules and members (as the snapshot counts them) of the shapes' server groups."""
        heads = [head.vm for shape in shapes if shape.needs_whole_fleet and (head := self.index.head(shape))]
        if not heads:
            return None
        return await RoundGroups.load(self.groups, heads)

    # -- expire ---------------------------------------------------------------------------------
    async def _expire(self) -> None:
        now = self.clock()
        due = bool(self._deadlines) and self._deadlines[0][0] <= now
        while self._deadlines and self._deadlines[0][0] <= now:
            heapq.heappop(self._deadlines)
        if not due and time.monotonic() < self._next_expiry:
            return
        self._next_expiry = time.monotonic() + EXPIRE_EVERY
        ended = await self.store.expire()
        if not ended:
            return
        for vm in ended:
            self.index.remove(vm.vm_id)
        log.info("waiting VMs waited their wait_s: unschedulable", count=len(ended))
        await self.publisher.publish(events.VM_UNSCHEDULABLE, VmUnschedulable(vms=list(ended)))
