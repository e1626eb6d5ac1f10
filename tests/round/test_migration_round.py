"""Choosing a migration's target in a scheduling round, on the in-memory fakes and on the real Redis
and PostgreSQL alike: the same pipeline as a placement, the source excluded, both hosts held."""

from __future__ import annotations

from tests.round.worlds import World
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import ZERO, Resources
from vmsched_contract.status import Task, VmStatus
from vmsched_scheduler.migration_round import MigrationItem, NoTargetFound, TargetChosen
from vmsched_scheduler.round_items import Ignored

HOST = Resources(cpu=8, memory_mb=16384, disk_gb=100)
VM = Resources(cpu=2, memory_mb=4096, disk_gb=10)


async def test_the_target_is_claimed_beside_the_source_which_is_never_chosen(world: World) -> None:
    await world.add_host("hv-1", HOST)  # the source: emptier than hv-2, yet never the target
    await world.add_host("hv-2", HOST, allocated=Resources(cpu=4, memory_mb=8192, disk_gb=50))
    vm = await world.add_running_vm(VM, "hv-1")
    request = await world.ask_migration(vm.id)
    (outcome,) = await world.round.run_migrations([MigrationItem(request)])
    assert isinstance(outcome, TargetChosen), outcome
    assert (outcome.fresh, outcome.event.source, outcome.event.target) == (True, "hv-1", "hv-2")
    stored = await world.vm(vm.id)
    assert (stored.status, stored.task, stored.hypervisor_id, stored.migration_target) == (
        VmStatus.MIGRATING,
        Task.PREPARING,
        "hv-1",
        "hv-2",
    )
    assert await world.allocated("hv-1") == (VM, VM)
    both = Resources(cpu=6, memory_mb=12288, disk_gb=60)
    assert await world.allocated("hv-2") == (both, both)
    assert (await world.claimed_on(vm.id), await world.target_claimed_on(vm.id)) == ("hv-1", "hv-2")
    assert stored.placement is not None
    assert PlacementRecord.model_validate(stored.placement).host == "hv-2"


async def test_a_host_whose_agent_cannot_migrate_is_never_the_target(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST, can_migrate=False)  # the emptiest
    await world.add_host("hv-3", HOST, allocated=Resources(cpu=4, memory_mb=8192, disk_gb=50))
    vm = await world.add_running_vm(VM, "hv-1")
    (outcome,) = await world.round.run_migrations([MigrationItem(await world.ask_migration(vm.id))])
    assert isinstance(outcome, TargetChosen)
    assert outcome.event.target == "hv-3"
    assert (await world.allocated("hv-2"))[0] == ZERO


async def test_no_target_leaves_the_vm_running_on_its_source_with_the_reason_and_nothing_claimed(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST, can_migrate=False)
    await world.add_host("hv-3", HOST, allocated=Resources(cpu=7, memory_mb=0, disk_gb=0))
    vm = await world.add_running_vm(VM, "hv-1")
    (outcome,) = await world.round.run_migrations([MigrationItem(await world.ask_migration(vm.id))])
    assert isinstance(outcome, NoTargetFound), outcome
    assert (outcome.event.source, outcome.event.target, outcome.event.reason) == ("hv-1", None, "cpu")
    assert outcome.event.detail == "none of 3 hosts fits (excluded: 1, migration: 1, cpu: 1)"
    stored = await world.vm(vm.id)
    assert (stored.status, stored.hypervisor_id, stored.task, stored.migration_target) == (
        VmStatus.RUNNING,
        "hv-1",
        None,
        None,
    )
    assert stored.status_reason is not None
    assert stored.status_reason.startswith("migration failed: cpu:")
    assert await world.target_claimed_on(vm.id) is None
    assert await world.allocated("hv-3") == (Resources(cpu=7, memory_mb=0, disk_gb=0),) * 2


async def test_a_named_target_is_the_only_one_tried_and_its_refusal_names_its_rule(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    await world.add_host("hv-3", HOST, allocated=Resources(cpu=7, memory_mb=0, disk_gb=0))
    vm = await world.add_running_vm(VM, "hv-1")
    (outcome,) = await world.round.run_migrations([MigrationItem(await world.ask_migration(vm.id, "hv-3"))])
    assert isinstance(outcome, NoTargetFound), outcome
    assert outcome.event.reason == "cpu"
    assert outcome.event.detail.startswith("cpu: needs 2, 1 free"), outcome.event.detail
    (outcome,) = await world.round.run_migrations([MigrationItem(await world.ask_migration(vm.id, "hv-2"))])
    assert isinstance(outcome, TargetChosen)
    assert outcome.event.target == "hv-2"


async def test_a_redelivered_request_announces_the_same_target_and_claims_once(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    vm = await world.add_running_vm(VM, "hv-1")
    request = await world.ask_migration(vm.id)
    (first,) = await world.round.run_migrations([MigrationItem(request)])
    (again,) = await world.round.run_migrations([MigrationItem(request)])
    assert isinstance(first, TargetChosen)
    assert isinstance(again, TargetChosen)
    assert (again.fresh, again.event.target) == (False, first.event.target)
    assert await world.allocated("hv-2") == (VM, VM)
    stale = MigrationItem(request.model_copy(update={"migration": request.migration + 1}))
    (ignored,) = await world.round.run_migrations([stale])
    assert isinstance(ignored, Ignored)


async def test_a_target_postgresql_refuses_gives_its_claim_back_and_another_is_chosen(world: World) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    await world.add_host("hv-3", HOST, allocated=Resources(cpu=4, memory_mb=0, disk_gb=0))
    await world.pause_in_ledger_only("hv-2")  # the snapshot has not heard yet
    vm = await world.add_running_vm(VM, "hv-1")
    (outcome,) = await world.round.run_migrations([MigrationItem(await world.ask_migration(vm.id))])
    assert isinstance(outcome, TargetChosen)
    assert outcome.event.target == "hv-3"
    assert await world.allocated("hv-2") == (ZERO, ZERO)
    assert await world.target_claimed_on(vm.id) == "hv-3"
