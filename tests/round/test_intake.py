"""The scheduler's consumer in process, without servers: FastStream's TestRabbitBroker delivers
``vm.create`` to the same subscriber the service runs, in front of a round on the in-memory fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from faststream.rabbit import RabbitBroker, RabbitQueue, TestRabbitBroker

from tests.round.worlds import MemoryWorld
from vmsched_amqp import topology
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import (
    Resources,
    VmAssigned,
    VmCreate,
    VmMigrating,
    VmMigrationFailed,
    VmPreempted,
    VmUnschedulable,
)
from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord
from vmsched_scheduler.bootstrap import subscribe
from vmsched_scheduler.intake import MigrationIntake, PlacementIntake
from vmsched_scheduler.round_items import Outcome, RoundItem

HOST = Resources(cpu=4, memory_mb=8192, disk_gb=100)
VM = Resources(cpu=2, memory_mb=2048, disk_gb=10)


def scheduler(
    world: MemoryWorld, send_deletes: Callable[[Sequence[VmRecord]], Awaitable[None]] | None = None
) -> tuple[RabbitBroker, list[VmAssigned], list[VmUnschedulable]]:
    broker = RabbitBroker()
    assigned: list[VmAssigned] = []
    refused: list[VmUnschedulable] = []
    publisher = Publisher(broker)
    subscribe(
        broker,
        PlacementIntake(world.round, publisher, send_deletes=send_deletes, max_vms=500, max_delay=0.001),
        MigrationIntake(world.round, publisher, max_moves=500, max_delay=0.001),
    )

    @broker.subscriber(RabbitQueue("test.assigned", routing_key=topology.VM_ASSIGNED), topology.EXCHANGE)
    async def on_assigned(event: VmAssigned) -> None:
        assigned.append(event)

    @broker.subscriber(RabbitQueue("test.unschedulable", routing_key=topology.VM_UNSCHEDULABLE), topology.EXCHANGE)
    async def on_unschedulable(event: VmUnschedulable) -> None:
        refused.append(event)

    return broker, assigned, refused


async def test_one_message_of_many_vms_is_answered_by_one_assigned_and_one_unschedulable() -> None:
    world = MemoryWorld.build()
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    vms = [await world.add_vm(VM, name=f"vm-{n}") for n in range(5)]  # room for four
    broker, assigned, refused = scheduler(world)
    async with TestRabbitBroker(broker) as test_broker:
        await test_broker.publish(VmCreate(vms=vms), exchange=topology.EXCHANGE, routing_key=topology.VM_CREATE)
    assert len(assigned) == 1
    assert [a.vm_id for a in assigned[0].assignments] == [vm.vm_id for vm in vms[:4]]
    assert {a.hypervisor_id for a in assigned[0].assignments} == {"hv-1", "hv-2"}
    assert len(refused) == 1
    (unplaced,) = refused[0].vms
    assert (unplaced.vm_id, unplaced.reason) == (vms[4].vm_id, "cpu")


async def test_messages_arriving_together_share_a_round_and_each_gets_its_own_answer() -> None:
    world = MemoryWorld.build()
    await world.add_host("hv-1", Resources(cpu=64, memory_mb=65536, disk_gb=1000))
    vms = [await world.add_vm(VM, name=f"vm-{n}") for n in range(6)]
    rounds: list[int] = []
    run = world.round.run

    async def counted(items: Sequence[RoundItem]) -> list[Outcome]:
        rounds.append(len(items))
        return await run(items)

    world.round.run = counted  # type: ignore[method-assign]
    broker, assigned, refused = scheduler(world)
    async with TestRabbitBroker(broker) as test_broker:
        await asyncio.gather(
            *(
                test_broker.publish(VmCreate(vms=[vm]), exchange=topology.EXCHANGE, routing_key=topology.VM_CREATE)
                for vm in vms
            )
        )
    assert sorted(a.vm_id for event in assigned for a in event.assignments) == sorted(vm.vm_id for vm in vms)
    assert all(len(event.assignments) == 1 for event in assigned)  # one answer per message
    assert refused == []
    assert sum(rounds) == len(vms)
    assert len(rounds) < len(vms), rounds  # some messages shared a round


async def test_a_vm_that_preempted_is_answered_by_vm_preempted_for_its_victims_and_vm_assigned() -> None:
    """The victims' announcement once raised NameError (a local list named ``events`` hid the module
    of that name): the message was delivered again, its VM announced without its victims, and their
    deletes left to the outbox's sweeper."""
    world = MemoryWorld.build()
    await world.add_host("hv-1", HOST)
    await world.add_running_vm(VM, "hv-1", name="low-1")
    await world.add_running_vm(VM, "hv-1", name="low-2")  # the host is full (priority 0 both)
    urgent = await world.add_vm(VM, name="urgent", priority=500)
    deleted: list[VmRecord] = []

    async def send_deletes(victims: Sequence[VmRecord]) -> None:  # the agents' exchange is not in the test broker
        deleted.extend(victims)

    broker, assigned, refused = scheduler(world, send_deletes)
    preempted: list[VmPreempted] = []

    @broker.subscriber(RabbitQueue("test.preempted", routing_key=topology.VM_PREEMPTED), topology.EXCHANGE)
    async def on_preempted(event: VmPreempted) -> None:
        preempted.append(event)

    async with TestRabbitBroker(broker) as test_broker:
        await test_broker.publish(VmCreate(vms=[urgent]), exchange=topology.EXCHANGE, routing_key=topology.VM_CREATE)
    assert [(a.vm_id, a.hypervisor_id, a.preempted) for event in assigned for a in event.assignments] == [
        (urgent.vm_id, "hv-1", True)
    ]
    assert [(e.preempted_by, e.hypervisor_id) for e in preempted] == [(urgent.vm_id, "hv-1")]
    assert [(v.id, v.status) for v in deleted] == [(preempted[0].vm_id, VmStatus.PREEMPTED)]
    assert refused == []


async def test_a_vm_migrate_is_answered_by_vm_migrating_or_vm_migration_failed() -> None:
    world = MemoryWorld.build()
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    movable = await world.add_running_vm(VM, "hv-1", name="movable")
    stuck = await world.add_running_vm(VM, "hv-1", name="stuck")
    broker, _, _ = scheduler(world)
    migrating: list[VmMigrating] = []
    failed: list[VmMigrationFailed] = []

    @broker.subscriber(RabbitQueue("test.migrating", routing_key=topology.VM_MIGRATING), topology.EXCHANGE)
    async def on_migrating(event: VmMigrating) -> None:
        migrating.append(event)

    @broker.subscriber(RabbitQueue("test.failed", routing_key=topology.VM_MIGRATION_FAILED), topology.EXCHANGE)
    async def on_failed(event: VmMigrationFailed) -> None:
        failed.append(event)

    async with TestRabbitBroker(broker) as test_broker:
        request = await world.ask_migration(movable.id)
        await test_broker.publish(request, exchange=topology.EXCHANGE, routing_key=topology.VM_MIGRATE)
        nowhere = await world.ask_migration(stuck.id, "hv-3")  # no such host
        await test_broker.publish(nowhere, exchange=topology.EXCHANGE, routing_key=topology.VM_MIGRATE)
    assert [(e.vm_id, e.source, e.target) for e in migrating] == [(movable.id, "hv-1", "hv-2")]
    assert [(e.vm_id, e.target, e.reason) for e in failed] == [(stuck.id, None, "migration")]
