"""A scheduling round, on the in-memory fakes and on the real Redis and PostgreSQL alike."""

from __future__ import annotations

import time
from uuid import UUID, uuid4

from tests.round.worlds import World
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import ZERO, Resources
from vmsched_contract.status import VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_scheduler.round_items import Assigned, Ignored, Later, NotPlaced, RoundItem

HOST = Resources(cpu=8, memory_mb=16384, disk_gb=100)
VM = Resources(cpu=2, memory_mb=4096, disk_gb=10)


def items(*vms: object) -> list[RoundItem]:
    return [RoundItem(vm) for vm in vms]  # type: ignore[arg-type]


async def record_of(world: World, vm_id: UUID) -> PlacementRecord:
    vm = await world.vm(vm_id)
    assert vm.placement is not None
    return PlacementRecord.model_validate(vm.placement)


async def test_a_round_places_many_vms_each_decided_against_what_the_ones_before_it_took(world: World) -> None:
    for host_id in ("hv-1", "hv-2", "hv-3"):
        await world.add_host(host_id, HOST)
    vms = [await world.add_vm(VM, name=f"web-{n}") for n in range(12)]  # exactly 4 per host
    outcomes = await world.round.run(items(*vms))
    assert all(isinstance(o, Assigned) and o.fresh for o in outcomes), outcomes
    hosts = [o.assignment.hypervisor_id for o in outcomes if isinstance(o, Assigned)]
    assert sorted(hosts) == sorted(["hv-1", "hv-2", "hv-3"] * 4)
    for host_id in ("hv-1", "hv-2", "hv-3"):
        in_pg, in_snapshot = await world.allocated(host_id)
        assert in_pg == in_snapshot == Resources(cpu=8, memory_mb=16384, disk_gb=40)
    for vm in vms:
        stored = await world.vm(vm.vm_id)
        assert stored.status is VmStatus.SCHEDULED
        assert await world.claimed_on(vm.vm_id) == stored.hypervisor_id


async def test_the_thirteenth_vm_of_a_full_fleet_is_unschedulable_with_the_rule_that_stopped_it(world: World) -> None:
    await world.add_host("hv-1", HOST)
    vms = [await world.add_vm(VM) for _ in range(5)]
    outcomes = await world.round.run(items(*vms))
    assert [type(o) for o in outcomes] == [Assigned] * 4 + [NotPlaced]
    last = outcomes[4]
    assert isinstance(last, NotPlaced)
    assert (last.unplaced.reason, last.unplaced.rejections) == ("cpu", {"cpu": 1})
    stored = await world.vm(vms[4].vm_id)
    assert stored.status is VmStatus.UNSCHEDULABLE
    assert stored.status_reason == "cpu: none of 1 hosts fits (cpu: 1)"
    record = await record_of(world, vms[4].vm_id)
    assert [example.host for example in record.examples["cpu"]] == ["hv-1"]
    assert record.examples["cpu"][0].reason.startswith("cpu: needs 2, 0 free")


async def test_a_host_over_capacity_on_gpus_takes_a_vm_without_gpus_and_refuses_one_with(world: World) -> None:
    # An agent reported fewer GPUs than are allocated: the fit rule checks only what a VM asks for.
    await world.add_host("hv-gpu", Resources(cpu=16, memory_mb=32768, disk_gb=500, gpu=1), allocated=ZERO)
    await world.take_behind_the_fleets_back("hv-gpu", Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=1))
    await world.take_behind_the_fleets_back("hv-gpu", Resources(cpu=0, memory_mb=0, disk_gb=0, gpu=0))
    plain = await world.add_vm(VM, name="plain")
    gpu = await world.add_vm(Resources(cpu=2, memory_mb=4096, disk_gb=10, gpu=1), name="gpu")
    outcomes = await world.round.run(items(plain, gpu))
    assert isinstance(outcomes[0], Assigned)
    assert outcomes[0].assignment.hypervisor_id == "hv-gpu"
    assert isinstance(outcomes[1], NotPlaced)
    assert outcomes[1].unplaced.reason == "gpu"


async def test_a_label_no_host_has_is_reported_as_labels(world: World) -> None:
    await world.add_host("hv-1", HOST, labels={"zone": "z2"})
    await world.add_host("hv-2", HOST)
    vm = await world.add_vm(VM, labels={"zone": "z1"})
    (outcome,) = await world.round.run(items(vm))
    assert isinstance(outcome, NotPlaced)
    assert (outcome.unplaced.reason, outcome.unplaced.rejections) == ("labels", {"labels": 2})
    record = await record_of(world, vm.vm_id)
    assert {example.reason for example in record.examples["labels"]} == {
        "labels: missing zone=z1 (host has zone=z2)",
        "labels: missing zone=z1",
    }


async def test_a_claim_refused_in_redis_is_a_rejection_and_the_vm_goes_elsewhere(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", Resources(cpu=4, memory_mb=16384, disk_gb=100))
    await world.view.refresh()
    world.view.frozen = True  # the engine's copy stops seeing changes
    # Another scheduler fills hv-1 (the least loaded one, the engine's choice) behind its back.
    await world.take_behind_the_fleets_back("hv-1", Resources(cpu=8, memory_mb=0, disk_gb=0))
    vm = await world.add_vm(VM)
    (outcome,) = await world.round.run(items(vm))
    assert isinstance(outcome, Assigned)
    assert outcome.assignment.hypervisor_id == "hv-2"
    record = await record_of(world, vm.vm_id)
    assert [(r.host, r.stage, r.outcome, r.detail) for r in record.refused_claims] == [
        ("hv-1", "redis", "insufficient", "cpu")
    ]
    assert record.claim_conflicts == 1
    in_pg, in_snapshot = await world.allocated("hv-1")
    assert in_pg.cpu == in_snapshot.cpu == 8  # nothing of the VM's stayed behind


async def test_a_host_postgresql_refuses_gives_its_claim_back_and_the_vm_goes_elsewhere(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST, allocated=Resources(cpu=4, memory_mb=0, disk_gb=0))
    await world.pause_in_ledger_only("hv-1")  # the snapshot has not heard yet
    vm = await world.add_vm(VM)
    (outcome,) = await world.round.run(items(vm))
    assert isinstance(outcome, Assigned)
    assert outcome.assignment.hypervisor_id == "hv-2"
    record = await record_of(world, vm.vm_id)
    assert [(r.host, r.stage) for r in record.refused_claims] == [("hv-1", "postgres")]
    in_pg, in_snapshot = await world.allocated("hv-1")
    assert in_pg == in_snapshot == ZERO
    assert await world.claimed_on(vm.vm_id) == "hv-2"


async def test_a_redelivered_vm_is_announced_again_on_the_same_host_and_claimed_once(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    vm = await world.add_vm(VM)
    (first,) = await world.round.run(items(vm))
    (again,) = await world.round.run(items(vm))
    assert isinstance(first, Assigned)
    assert first.fresh
    assert isinstance(again, Assigned)
    assert not again.fresh
    # Announced again from PostgreSQL, which does not say whether it preempted: the gateway looks.
    assert (first.assignment.preempted, again.assignment.preempted) == (False, None)
    assert again.assignment == first.assignment.model_copy(update={"preempted": None})
    host = first.assignment.hypervisor_id
    in_pg, in_snapshot = await world.allocated(host)
    assert in_pg == in_snapshot == VM


async def test_vms_whose_earlier_delivery_claimed_but_never_committed_are_placed_where_they_hold(
    world: World,
) -> None:
    # The first delivery of the batch claimed the whole host, then PostgreSQL went down before the
    # commit. Redelivered, each VM must not be turned away by its own claim.
    await world.add_host("hv-1", HOST)
    vms = [await world.add_vm(VM, name=f"held-{n}") for n in range(4)]
    for vm in vms:
        await world.claim_without_commit(vm.vm_id, "hv-1", VM)
    outcomes = await world.round.run(items(*vms))
    assert [o.assignment.hypervisor_id if isinstance(o, Assigned) else o for o in outcomes] == ["hv-1"] * 4
    in_pg, in_snapshot = await world.allocated("hv-1")
    assert in_pg == in_snapshot == Resources(cpu=8, memory_mb=16384, disk_gb=40)  # each claimed once
    for vm in vms:
        assert (await world.vm(vm.vm_id)).status is VmStatus.SCHEDULED


async def test_exclusions_are_set_aside_when_no_other_host_fits(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST, labels={"zone": "far"})
    vm = await world.add_vm(VM, exclude=["hv-1"], labels={})
    excluded_but_alone = await world.add_vm(VM, exclude=["hv-1", "hv-2"])
    outcomes = await world.round.run(items(vm, excluded_but_alone))
    assert isinstance(outcomes[0], Assigned)
    assert outcomes[0].assignment.hypervisor_id == "hv-2"
    assert not (await record_of(world, vm.vm_id)).exclusions_ignored
    assert isinstance(outcomes[1], Assigned)
    assert (await record_of(world, excluded_but_alone.vm_id)).exclusions_ignored


async def test_no_host_while_postgresql_knows_more_online_hosts_is_tried_again_later(world: World) -> None:
    await world.set_online_hosts(3)  # as after a Redis flush: the snapshot has none of them yet
    vm = await world.add_vm(VM)
    (outcome,) = await world.round.run(items(vm))
    assert isinstance(outcome, Later)
    assert (await world.vm(vm.vm_id)).status is VmStatus.PENDING


async def test_no_online_host_in_the_snapshot_while_postgresql_knows_some_is_tried_again_later(world: World) -> None:
    # After a Redis flush the scheduler's copy may still hold hosts the flush took, their last
    # heartbeats long past (refused claims drop the live ones first): it has as many hosts as
    # PostgreSQL knows online, but none online itself. Here the round's clock is an hour ahead.
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    world.round.clock = lambda: time.time() + 3600
    vm = await world.add_vm(VM)
    (outcome,) = await world.round.run(items(vm))
    assert isinstance(outcome, Later), outcome
    assert (await world.vm(vm.vm_id)).status is VmStatus.PENDING


async def test_a_vm_at_another_attempt_than_the_message_is_ignored(world: World) -> None:
    await world.add_host("hv-1", HOST)
    vm = await world.add_vm(VM)
    stale = vm.model_copy(update={"attempt": 7})
    (outcome,) = await world.round.run(items(stale))
    assert isinstance(outcome, Ignored)
    assert (await world.vm(vm.vm_id)).status is VmStatus.PENDING
    assert await world.claimed_on(vm.vm_id) is None


async def test_round_robin_vms_of_one_round_take_consecutive_turns(world: World) -> None:
    for host_id in ("hv-1", "hv-2", "hv-3"):
        await world.add_host(host_id, HOST)
    vms = [await world.add_vm(VM, strategy=Strategy.ROUND_ROBIN) for _ in range(3)]
    outcomes = await world.round.run(items(*vms))
    hosts = [o.assignment.hypervisor_id for o in outcomes if isinstance(o, Assigned)]
    assert sorted(hosts) == ["hv-1", "hv-2", "hv-3"]


async def test_a_vm_naming_a_reservation_that_holds_no_slot_for_it_is_unschedulable_and_takes_no_room(
    world: World,
) -> None:
    # A free host would take it: a VM on a reservation goes onto a slot of it or nowhere.
    await world.add_host("hv-1", HOST)
    reservation = uuid4()
    vm = (await world.add_vm(VM)).model_copy(update={"reservation": reservation})
    (outcome,) = await world.round.run(items(vm))
    assert isinstance(outcome, NotPlaced)
    assert outcome.unplaced.reason == "reservation"
    assert str(reservation) in outcome.unplaced.detail
    stored = await world.vm(vm.vm_id)
    assert stored.status is VmStatus.UNSCHEDULABLE
    assert stored.status_reason is not None
    assert stored.status_reason.startswith("reservation: ")
    assert await world.claimed_on(vm.vm_id) is None
    assert await world.allocated("hv-1") == (ZERO, ZERO)
