"""The guard every kind of pass goes through before it says that no host fits (placements, all-or-
nothing batches, migration targets alike), on the fakes and on the real servers: after a Redis flush
the VMs are tried again later, and a copy of the fleet that lags behind the snapshot reads it again
and decides once more, so no VM ends unschedulable on a stale view."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest

from tests.round.worlds import SETTINGS, World
from vmsched_contract.messages import Resources
from vmsched_contract.status import VmStatus
from vmsched_scheduler.migration_round import MigrationItem, TargetChosen
from vmsched_scheduler.round_items import Assigned, Later, RoundItem

HOST = Resources(cpu=8, memory_mb=16384, disk_gb=100)
VM = Resources(cpu=2, memory_mb=4096, disk_gb=10)

# A kind of pass, run on a world whose hosts are hv-1 and hv-2: what it asks, and its outcomes.
Run = Callable[[World], Awaitable[list[object]]]


async def placement(world: World) -> list[object]:
    vm = await world.add_vm(VM)
    return list(await world.round.run([RoundItem(vm)]))


async def gang(world: World) -> list[object]:
    vms = [await world.add_vm(VM, name=f"g{n}") for n in range(2)]
    return list(await world.round.run_gang([RoundItem(vm) for vm in vms]))


async def migration(world: World) -> list[object]:
    vm = await world.add_running_vm(VM, "hv-1")
    return list(await world.round.run_migrations([MigrationItem(await world.ask_migration(vm.id))]))


PASSES = pytest.mark.parametrize("run", [placement, gang, migration], ids=["placement", "gang", "migration"])


@PASSES
async def test_no_host_online_in_the_copy_while_postgresql_knows_some_is_tried_again_later(
    world: World, run: Run
) -> None:
    # After a Redis flush the copy may still hold hosts the flush took, their heartbeats long past:
    # as many hosts as PostgreSQL knows online, none online itself. The round's clock an hour ahead.
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    world.round.clock = lambda: time.time() + 3600
    outcomes = await run(world)
    assert outcomes
    assert all(isinstance(outcome, Later) for outcome in outcomes), outcomes


@PASSES
async def test_no_host_while_postgresql_knows_more_online_hosts_is_tried_again_later(world: World, run: Run) -> None:
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    # No host takes the VM (a migration's source, hv-1, is never its target).
    for host in ("hv-1", "hv-2") if run is not migration else ("hv-2",):
        await world.set_paused(host, True)
    await world.set_online_hosts(3)  # as after a Redis flush: the snapshot has none of them yet
    outcomes = await run(world)
    assert all(isinstance(outcome, Later) for outcome in outcomes), outcomes


@PASSES
async def test_a_host_unpaused_a_moment_ago_takes_the_vm_though_the_copy_had_not_read_it_yet(
    world: World, run: Run
) -> None:
    """An operator's PATCH answered, then at once a VM: the scheduler's copy, refreshed a moment
    before the PATCH reached the snapshot, still has the host paused (a refresh is skipped within a
    few milliseconds of the last). The guard reads it again before saying that no host fits."""
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    for host in ("hv-1", "hv-2") if run is not migration else ("hv-2",):
        await world.set_paused(host, True)
    await world.view.refresh()
    world.view.lagging = True
    await world.set_paused("hv-2", False)

    outcomes = await run(world)

    assert outcomes
    for outcome in outcomes:
        if isinstance(outcome, TargetChosen):
            assert outcome.event.target == "hv-2"
        else:
            assert isinstance(outcome, Assigned), outcome
            assert outcome.assignment.hypervisor_id == "hv-2"
            assert (await world.vm(outcome.assignment.vm_id)).status is VmStatus.SCHEDULED


@PASSES
async def test_a_copy_that_changes_at_every_look_but_still_fits_nowhere_settles_the_vms_at_once(
    world: World, run: Run
) -> None:
    """On a busy fleet a heartbeat changes the snapshot between any two looks, so "the copy caught up
    a change" alone would decide a VM that fits nowhere again and again until the round gives up
    (a batch whole, every time). The guard asks whether what rejected the VMs is gone: it is not."""
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    for host in ("hv-1", "hv-2") if run is not migration else ("hv-2",):
        await world.set_paused(host, True)
    # Too small for any of the VMs, and busy: its memory changes at every look.
    await world.add_host("hv-3", Resources(cpu=1, memory_mb=16384, disk_gb=100))
    await world.view.refresh()
    caught_up = world.view.catch_up
    looks = 0

    async def busy_catch_up() -> bool:
        nonlocal looks
        looks += 1
        await world.take_behind_the_fleets_back("hv-3", Resources(cpu=0, memory_mb=1, disk_gb=0))
        return await caught_up()

    world.view.catch_up = busy_catch_up  # type: ignore[method-assign]

    outcomes = await run(world)

    assert outcomes
    assert looks == 1, looks  # one pass, one look: nothing was decided again
    assert not any(isinstance(outcome, Later) for outcome in outcomes), outcomes


@PASSES
async def test_no_known_host_heard_from_at_all_is_tried_again_later(world: World, run: Run) -> None:
    # The gateway cut from its PostgreSQL or Redis folds no heartbeat: every host looks silent at once,
    # in PostgreSQL (here: none it may place on) and in the snapshot, though all run
    # (tests/faults/test_partitions.py: gateway-redis-blackholed made VMs unschedulable). The round's
    # clock two offline timeouts ahead: every host heard last at the same moment, a moment ago.
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    for host in ("hv-1", "hv-2"):  # PostgreSQL counts no host it may place on
        await world.pause_in_ledger_only(host)
    world.round.clock = lambda: time.time() + 2 * SETTINGS.offline_timeout
    outcomes = await run(world)
    assert outcomes
    assert all(isinstance(outcome, Later) for outcome in outcomes), outcomes


@PASSES
async def test_a_fleet_silent_for_long_is_gone_and_its_vms_are_settled(world: World, run: Run) -> None:
    # As above, but the hosts fell silent an hour ago: no cut lasts that long unnoticed, the fleet is
    # gone, and the VMs are told so (no_available_agents) instead of waiting for it for ever.
    await world.add_host("hv-1", HOST)
    await world.add_host("hv-2", HOST)
    for host in ("hv-1", "hv-2"):
        await world.pause_in_ledger_only(host)
    world.round.clock = lambda: time.time() + 3600
    outcomes = await run(world)
    assert outcomes
    assert not any(isinstance(outcome, Later) for outcome in outcomes), outcomes
