"""The Redis snapshot's Lua scripts on the real Redis: a claim and its release leave a host as it was."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

import pytest
from redis.asyncio import Redis

from tests.integration.rows import delete_keys, online_host
from tests.servers import Servers
from vmsched_contract.messages import Overcommit, Resources
from vmsched_placement.inputs import demand_of
from vmsched_redis.claims import Claim, OwnChange
from vmsched_redis.host_hash import SnapshotHost
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.fleet_cache import FleetCache

CAPACITY = Resources(cpu=16, memory_mb=65536, disk_gb=1000, gpu=2)
ZERO = Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=0)


@pytest.fixture
async def snapshot(servers: Servers) -> AsyncIterator[Snapshot]:
    redis = Redis.from_url(servers.redis_url, decode_responses=True)
    prefix = f"{servers.redis_key_prefix}-snapshot-{uuid.uuid4().hex[:6]}"
    snap = Snapshot(redis, prefix)
    await snap.record_heartbeats(
        [online_host("hv-s1", CAPACITY)],
        bump_interval=5.0,
    )
    try:
        yield snap
    finally:
        await delete_keys(redis, prefix)
        await redis.aclose()


async def _allocated(snapshot: Snapshot) -> tuple[Resources, int]:
    host = (await snapshot.read_hosts(["hv-s1"]))["hv-s1"]
    assert host is not None
    return host.allocated, host.vm_count


@pytest.mark.parametrize("gpu", [0, 1])
async def test_release_gives_back_exactly_the_claim_once(snapshot: Snapshot, gpu: int) -> None:
    vm_id = uuid.uuid4()
    claim = Resources(cpu=2, memory_mb=2048, disk_gb=20, gpu=gpu)
    assert (await snapshot.claim(vm_id, "hv-s1", claim, now=time.time())).outcome == "claimed"
    assert await _allocated(snapshot) == (claim, 1)
    # A retry of the same VM holds the claim it has; it does not claim twice.
    assert (await snapshot.claim(vm_id, "hv-s1", claim, now=time.time())).outcome == "held"
    assert await _allocated(snapshot) == (claim, 1)

    assert await snapshot.release(vm_id) == "hv-s1"
    assert await _allocated(snapshot) == (ZERO, 0)
    assert await snapshot.claim_of(vm_id) is None
    # Releasing again (a redelivered status report) changes nothing.
    assert await snapshot.release(vm_id) is None
    assert await _allocated(snapshot) == (ZERO, 0)


async def test_a_claim_beyond_capacity_is_refused_naming_the_resource_and_changes_nothing(
    snapshot: Snapshot,
) -> None:
    too_big = Resources(cpu=17, memory_mb=1024, disk_gb=10, gpu=0)
    result = await snapshot.claim(uuid.uuid4(), "hv-s1", too_big, now=time.time())
    assert (result.outcome, result.detail) == ("insufficient", "cpu")
    assert await _allocated(snapshot) == (ZERO, 0)


async def test_claims_of_one_call_run_in_order_each_seeing_the_ones_before(snapshot: Snapshot) -> None:
    half = Resources(cpu=8, memory_mb=1024, disk_gb=10)
    first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    claimed = await snapshot.claim_many(
        [
            Claim(first, "hv-s1", half),
            Claim(second, "hv-s1", half),
            Claim(third, "hv-s1", half),
            Claim(first, "hv-s1", half),
        ],
        time.time(),
    )
    assert [(r.outcome, r.detail) for r in claimed.results] == [
        ("claimed", "hv-s1"),
        ("claimed", "hv-s1"),
        ("insufficient", "cpu"),
        ("held", "hv-s1"),
    ]
    # The host changed once for the call, after the heartbeat that created it: what it was, what it is.
    change = claimed.changes["hv-s1"]
    assert change.seq == await snapshot.current_seq()
    assert change.before < change.seq
    assert await _allocated(snapshot) == (Resources(cpu=16, memory_mb=2048, disk_gb=20), 2)
    assert await snapshot.release_many([third, first, second, first]) == [None, "hv-s1", "hv-s1", None]
    assert await _allocated(snapshot) == (ZERO, 0)


async def test_claims_on_unknown_offline_or_paused_hosts_are_refused_saying_why(snapshot: Snapshot) -> None:
    vm = Resources(cpu=1, memory_mb=1, disk_gb=1)
    assert (await snapshot.claim(uuid.uuid4(), "hv-nowhere", vm, time.time())).outcome == "unknown_host"
    await snapshot.set_host_fields("hv-s1", {"paused": "1"})
    assert (await snapshot.claim(uuid.uuid4(), "hv-s1", vm, time.time())).outcome == "paused"
    await snapshot.set_host_fields("hv-s1", {"paused": "0", "status": "offline"})
    refused = await snapshot.claim(uuid.uuid4(), "hv-s1", vm, time.time())
    assert (refused.outcome, refused.detail) == ("offline", "offline")


class CountingSnapshot(Snapshot):
    """The real snapshot, counting the reads the scheduler's cache makes of it."""

    full_reads = 0
    change_reads = 0
    hosts_read = 0

    async def read_hosts(self, host_ids: Sequence[str]) -> dict[str, SnapshotHost | None]:
        self.hosts_read += len(host_ids)
        return await super().read_hosts(host_ids)

    during_full_read: Callable[[], Awaitable[None]] | None = None

    async def read_all(self, *, slice_size: int = 1000) -> tuple[int, dict[str, SnapshotHost]]:
        self.full_reads += 1
        read = await super().read_all(slice_size=slice_size)
        if self.during_full_read is not None:  # something that lands after the read, before the swap
            await self.during_full_read()
        return read

    async def changed_since(self, seq: int) -> tuple[int, dict[str, int]]:
        self.change_reads += 1
        return await super().changed_since(seq)


async def test_a_refresh_skips_hosts_whose_last_change_is_a_claim_the_cache_booked_itself(snapshot: Snapshot) -> None:
    counting = CountingSnapshot(snapshot.redis, snapshot.prefix)
    cache = FleetCache(counting)
    await cache.refresh()
    counting.hosts_read = 0  # the first refresh read the fleet whole
    vm = Resources(cpu=2, memory_mb=1024, disk_gb=10)
    claimed = await counting.claim_many([Claim(uuid.uuid4(), "hv-s1", vm)], time.time())
    cache.fleet.allocate("hv-s1", demand_of(vm))
    cache.booked(claimed.changes, on=cache.fleet)
    await cache.refresh()
    assert counting.hosts_read == 0  # booked: nothing to read
    await counting.claim(uuid.uuid4(), "hv-s1", vm, time.time())  # another scheduler, behind its back
    await cache.refresh()
    assert counting.hosts_read == 1
    host = cache.fleet.host("hv-s1")
    assert host is not None
    assert host.allocated.cpu == 4


async def test_concurrent_refreshes_share_one_read_and_see_what_changed_before_they_asked(
    snapshot: Snapshot,
) -> None:
    counting = CountingSnapshot(snapshot.redis, snapshot.prefix)
    cache = FleetCache(counting)

    # Fifty handlers at once: the first reads; those that asked while it ran cannot be sure it saw
    # what changed just before they asked, so one more read serves all of them. Two, not fifty.
    await asyncio.gather(*(cache.refresh() for _ in range(50)))
    assert counting.full_reads == 1
    assert counting.change_reads <= 1

    vm_id = uuid.uuid4()
    claim = await counting.claim(vm_id, "hv-s1", Resources(cpu=3, memory_mb=1024, disk_gb=10), time.time())
    assert claim.outcome == "claimed"
    before = counting.change_reads
    await asyncio.gather(*(cache.refresh() for _ in range(50)))
    assert 1 <= counting.change_reads - before <= 2
    host = cache.fleet.host("hv-s1")
    assert host is not None
    assert host.allocated.cpu == 3  # every caller asked after the claim: all see it


@pytest.mark.parametrize("booked", ["before the swap", "after the swap"])
async def test_a_full_read_beside_the_rounds_loses_no_claim_they_booked(snapshot: Snapshot, booked: str) -> None:
    """A round decides on the copy it has, claims, and books the claim on that copy; meanwhile the
    background read (older than the claim) replaces the copy. The claim is in the next refresh."""
    counting = CountingSnapshot(snapshot.redis, snapshot.prefix)
    cache = FleetCache(counting)
    await cache.refresh()
    vm = Resources(cpu=5, memory_mb=1024, disk_gb=10)
    deciding_on = cache.fleet

    async def a_round_claims() -> None:
        claimed = await counting.claim_many([Claim(uuid.uuid4(), "hv-s1", vm)], time.time())
        deciding_on.allocate("hv-s1", demand_of(vm))
        if booked == "before the swap":
            cache.booked(claimed.changes, on=deciding_on)
        else:
            self_swap.append(claimed.changes)

    self_swap: list[Mapping[str, OwnChange]] = []
    counting.during_full_read = a_round_claims
    await cache.reload()
    assert cache.fleet is not deciding_on
    for changes in self_swap:
        cache.booked(changes, on=deciding_on)

    await cache.refresh()

    host = cache.fleet.host("hv-s1")
    assert host is not None
    assert host.allocated.cpu == 5


async def test_the_ratios_read_alone_are_those_the_whole_host_read_gives(snapshot: Snapshot) -> None:
    # The gateway reads only these for the commands that put a VM on a host (command_ratios.py).
    await snapshot.record_heartbeats(
        [online_host("hv-s2", CAPACITY, overcommit=Overcommit(cpu=4.0, memory=1.5))], bump_interval=5.0
    )
    await snapshot.set_host_fields("hv-s2", {"cpu_ratio": "8.0"})  # an operator's PATCH, as the API writes it

    ratios = await snapshot.read_ratios(["hv-s1", "hv-s2", "no-such-host"])

    hosts = await snapshot.read_hosts(["hv-s1", "hv-s2"])
    assert ratios == {host_id: host.overcommit for host_id, host in hosts.items() if host is not None}
    assert ratios["hv-s2"] == Overcommit(cpu=8.0, memory=1.5)
    assert await snapshot.read_ratios([]) == {}
