"""Preemption in a round, on the in-memory fakes and on the real Redis and PostgreSQL alike: a VM that
fits nowhere takes the room of VMs of lower priority, in both stores at once, and nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from uuid import UUID

from tests.round.worlds import World
from vmsched_contract.decision import JournalRef
from vmsched_contract.messages import Resources
from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord
from vmsched_scheduler.migration_round import MigrationItem, TargetChosen
from vmsched_scheduler.round_items import Assigned, Later, NotPlaced, RoundItem

HOST = Resources(cpu=8, memory_mb=16384, disk_gb=100)
SMALL = Resources(cpu=2, memory_mb=2048, disk_gb=10)
LARGE = Resources(cpu=4, memory_mb=4096, disk_gb=10)


async def fill(world: World, *priorities: int) -> list[Assigned]:
    """One VM of SMALL per priority, placed by a round."""
    vms = [await world.add_vm(SMALL, name=f"low-{n}", priority=p) for n, p in enumerate(priorities)]
    outcomes = await world.round.run([RoundItem(vm) for vm in vms])
    assert all(isinstance(o, Assigned) for o in outcomes), outcomes
    return [o for o in outcomes if isinstance(o, Assigned)]


async def test_a_vm_that_fits_nowhere_takes_the_room_of_the_fewest_lowest_priority_vms(world: World) -> None:
    await world.add_host("hv-1", HOST)
    placed = await fill(world, 10, 5, 5, 100)  # the host is full
    urgent = await world.add_vm(LARGE, name="urgent", priority=500)
    (outcome,) = await world.round.run([RoundItem(urgent)])
    assert isinstance(outcome, Assigned), outcome
    assert outcome.assignment.hypervisor_id == "hv-1"
    victims = {record.id for record in outcome.preempted}
    lowest = {a.assignment.vm_id for a in placed[1:3]}  # the two of priority 5
    assert victims == lowest
    for victim in victims:
        stored = await world.vm(victim)
        assert stored.status is VmStatus.PREEMPTED
        assert stored.preempted_by == urgent.vm_id
        assert await world.claimed_on(victim) is None
    assert (await world.vm(urgent.vm_id)).status is VmStatus.SCHEDULED
    assert await world.claimed_on(urgent.vm_id) == "hv-1"
    in_pg, in_snapshot = await world.allocated("hv-1")
    assert in_pg == in_snapshot == Resources(cpu=8, memory_mb=8192, disk_gb=30)  # 10, 100 and urgent


async def test_nothing_of_equal_or_higher_priority_is_taken(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await fill(world, 500, 500, 900, 900)
    urgent = await world.add_vm(LARGE, name="urgent", priority=500)
    (outcome,) = await world.round.run([RoundItem(urgent)])
    assert isinstance(outcome, NotPlaced)
    assert outcome.unplaced.reason == "cpu"
    in_pg, in_snapshot = await world.allocated("hv-1")
    assert in_pg == in_snapshot == Resources(cpu=8, memory_mb=8192, disk_gb=40)


async def test_a_vm_of_priority_zero_never_preempts(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await fill(world, 0, 0, 0, 0)
    plain = await world.add_vm(SMALL, name="plain")
    (outcome,) = await world.round.run([RoundItem(plain)])
    assert isinstance(outcome, NotPlaced)


async def test_with_preemption_off_priority_takes_nothing(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await fill(world, 0, 0, 0, 0)
    world.round.settings = replace(world.round.settings, preemption=False)
    urgent = await world.add_vm(SMALL, name="urgent", priority=1000)
    (outcome,) = await world.round.run([RoundItem(urgent)])
    assert isinstance(outcome, NotPlaced)


async def test_a_host_the_vm_may_not_use_is_never_emptied_for_it(world: World) -> None:
    await world.add_host("hv-a", HOST, labels={"zone": "a"})
    await world.add_host("hv-b", HOST, labels={"zone": "b"})
    await fill(world, *[0] * 8)  # both full
    urgent = await world.add_vm(LARGE, name="urgent", priority=100, labels={"zone": "b"})
    (outcome,) = await world.round.run([RoundItem(urgent)])
    assert isinstance(outcome, Assigned)
    assert outcome.assignment.hypervisor_id == "hv-b"
    assert {(await world.vm(r.id)).hypervisor_id for r in outcome.preempted} == {"hv-b"}


async def test_a_migrating_vm_is_never_a_victim_on_its_source_nor_on_its_target(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    mover = await world.add_running_vm(Resources(cpu=6, memory_mb=4096, disk_gb=10), "hv-1")
    (moving,) = await world.round.run_migrations([MigrationItem(await world.ask_migration(mover.id))])
    assert isinstance(moving, TargetChosen), moving  # it holds 6 CPUs on both hosts now, at priority 0
    urgent = await world.add_vm(LARGE, name="urgent", priority=1000)
    (outcome,) = await world.round.run([RoundItem(urgent)])
    assert isinstance(outcome, NotPlaced), outcome
    assert outcome.unplaced.reason == "cpu"
    stored = await world.vm(mover.id)
    assert (stored.status, stored.hypervisor_id, stored.migration_target) == (VmStatus.MIGRATING, "hv-1", "hv-2")
    assert (await world.claimed_on(mover.id), await world.target_claimed_on(mover.id)) == ("hv-1", "hv-2")


class MovesEnded:
    """Evictions whose moves have all ended (as PostgreSQL says once the gateway committed them)."""

    async def moving_for(self, preemptor: UUID) -> int:
        return 0

    async def evict(
        self,
        preemptor: UUID,
        attempt: int,
        host_id: str,
        victims: Sequence[UUID],
        priority: int,
        journal: JournalRef | None = None,
    ) -> list[VmRecord] | None:
        raise AssertionError(f"no move was to start: {victims} off {host_id}")

    async def announce(self, moving: Sequence[VmRecord], priority: int) -> None:
        raise AssertionError("nothing to announce")


async def test_a_vm_whose_moved_victims_left_in_postgresql_but_not_yet_in_the_snapshot_waits_for_their_room(
    world: World,
) -> None:
    """The gateway commits a move's end before it hands the VM's claim over in Redis; a preemptor
    retried in between saw its host still full and its victims gone, and was called unschedulable
    for want of the room it waited for (test_preemption's move, 1 run in 5 on two busy cores)."""
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    await world.add_running_vm(Resources(cpu=2, memory_mb=2048, disk_gb=10), "hv-2", name="keep", priority=900)
    victim = await world.add_running_vm(Resources(cpu=6, memory_mb=4096, disk_gb=10), "hv-1", priority=10)
    urgent = await world.add_vm(Resources(cpu=8, memory_mb=2048, disk_gb=10), name="urgent", priority=500)
    (moving,) = await world.round.run_migrations([MigrationItem(await world.ask_migration(victim.id, "hv-2"))])
    assert isinstance(moving, TargetChosen), moving
    await world.keep_preemption(urgent.vm_id, "hv-1", [victim.id])
    world.round.evictions = MovesEnded()
    await world.end_migration_in_ledger_only(victim.id)

    (outcome,) = await world.round.run([RoundItem(urgent)])
    assert isinstance(outcome, Later), outcome
    assert (await world.vm(urgent.vm_id)).status is VmStatus.PENDING

    await world.round.claims.release_many([victim.id])  # the gateway gives the source's claim back
    (outcome,) = await world.round.run([RoundItem(urgent)])
    assert isinstance(outcome, Assigned), outcome
    assert outcome.assignment.hypervisor_id == "hv-1"
    assert not outcome.preempted  # its victim was moved, not deleted
    assert (await world.vm(victim.id)).status is VmStatus.RUNNING
