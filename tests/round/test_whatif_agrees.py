"""A simulation (``vmsched_placement.whatif.simulate``, what POST /v1/placement/simulate runs) lands
each VM where a scheduling round then places it, on the fakes and on the real Redis and PostgreSQL."""

from __future__ import annotations

import random
import time

import pytest

from tests.round.worlds import SETTINGS, World
from vmsched_contract.messages import Resources
from vmsched_contract.strategy import Strategy
from vmsched_placement import DecisionContext, Fleet
from vmsched_placement.inputs import placement_request
from vmsched_placement.whatif import simulate
from vmsched_scheduler.round_items import Assigned, RoundItem

SHAPES = [(4, 1), (2, 3), (6, 2), (8, 1), (3, 4), (5, 1), (64, 1), (1, 1)]  # (cpu, memory in 2 GiB)


@pytest.mark.parametrize("strategy", [Strategy.LEAST_LOADED, Strategy.BEST_FIT, Strategy.LEAST_UTILIZED])
async def test_a_simulation_lands_each_vm_where_a_round_then_places_it(world: World, strategy: Strategy) -> None:
    for host_id, cpu in (("hv-1", 8), ("hv-2", 12), ("hv-3", 16)):
        await world.add_host(host_id, Resources(cpu=cpu, memory_mb=16384, disk_gb=200))
    vms = [
        await world.add_vm(Resources(cpu=cpu, memory_mb=2048 * memory, disk_gb=10), name=f"vm-{i}", strategy=strategy)
        for i, (cpu, memory) in enumerate(SHAPES)
    ]
    await world.view.refresh()
    copy = Fleet.from_hosts(world.view.fleet)
    context = DecisionContext(
        now=time.time(), offline_timeout=SETTINGS.offline_timeout, weights=SETTINGS.weights, rng=random.Random(0)
    )
    simulated = [
        outcome.decision.host_id for outcome in simulate(copy, [placement_request(vm, strategy) for vm in vms], context)
    ]

    outcomes = await world.round.run([RoundItem(vm) for vm in vms])

    placed = [o.assignment.hypervisor_id if isinstance(o, Assigned) else None for o in outcomes]
    assert placed == simulated
    assert None in placed
    assert len({host for host in placed if host}) > 1
