"""The waker on the real Redis and PostgreSQL, tick by tick: a VM that enters ``waiting`` is tested
against hosts as they are now, not as the waker last read them. While no VM waits the waker leaves
the change feed unread; a host filled meanwhile must not look empty to the first VM that then waits
(it would be woken for nothing and lose an attempt)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from tests.round.worlds import ServersWorld
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import Resources, VmToPlace
from vmsched_placement import Weights
from vmsched_scheduler.round_items import Assigned, RoundItem
from vmsched_scheduler.waiting.waker import Waker

HOST = Resources(cpu=8, memory_mb=16384, disk_gb=100)
FILLER = Resources(cpu=8, memory_mb=1024, disk_gb=10)
SMALL = Resources(cpu=2, memory_mb=1024, disk_gb=10)


class NoBroker(Publisher):
    """A waker that wakes a VM publishes its vm.create; here, a wake is what the test looks for in
    PostgreSQL, so nothing is sent."""

    def __init__(self) -> None:
        self.sent: list[Sequence[VmToPlace]] = []

    async def vm_create(self, vms: Sequence[VmToPlace]) -> None:
        self.sent.append(vms)


async def test_a_vm_entering_waiting_is_tested_against_hosts_filled_while_nothing_waited(
    servers_world: ServersWorld,
) -> None:
    world = servers_world
    await world.add_host("hv-1", HOST)
    waker = Waker(world.engine, world.snapshot, NoBroker(), offline_timeout=15.0, weights=Weights())
    await waker.tick()  # takes the lease and reads everything: hv-1 empty, nothing waits
    assert waker.leading
    filler = await world.add_vm(FILLER, name="filler")
    (outcome,) = await world.round.run([RoundItem(filler)])
    assert isinstance(outcome, Assigned)  # hv-1 is full now; the waker has not read it
    await waker.tick()
    late = await world.add_vm(SMALL, name="late")
    async with world.engine.begin() as connection:
        await connection.execute(
            text("UPDATE vms SET status = 'waiting', wait_until = :until, updated_at = now() WHERE id = :id"),
            {"id": late.vm_id, "until": datetime.now(UTC) + timedelta(seconds=60)},
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        await waker.tick()
        stored = await world.vm(late.vm_id)
        if len(waker.index) or stored.attempt > 1:  # learnt, or woken (for nothing)
            break
    assert (stored.status.value, stored.attempt) == ("waiting", 1)  # not woken: hv-1 has no room
    assert len(waker.index) == 1
