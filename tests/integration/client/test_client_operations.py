"""vmsched_client against the real stack: an operator's work on running VMs and hosts (stop, start,
migrate, drain), what-if, replaying a decision and rebalancing plans, by the blocking and the asyncio
client."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator

import pytest

from devtools.stack import Stack, wait_for
from tests.integration.client.conftest import Fleet, small
from tests.integration.waiting import eventually
from vmsched_client import AsyncClient, Client, Conflict, Invalid, NotFound
from vmsched_client.calls import Call
from vmsched_contract.api import (
    DrainRequest,
)
from vmsched_contract.messages import HostSelectorTerm, SelectorOperator
from vmsched_contract.rebalance import Goal, MoveState, PlanState, RebalancePlan
from vmsched_contract.status import DrainState, VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_contract.whatif import SimulationRequest


def test_a_vm_is_stopped_started_migrated_and_its_host_drained(client: Client, fleet: Fleet) -> None:
    vm = client.create_vm(small(f"{fleet.suite}-mover", fleet))
    placed = client.wait_for_vm(vm.id, until=lambda v: v.status is VmStatus.RUNNING, timeout=60)
    source = placed.hypervisor_id
    (other,) = set(fleet.hosts) - {source}

    client.stop_vm(vm.id)
    stopped = client.wait_for_vm(vm.id, until=lambda v: v.status is VmStatus.STOPPED and v.task is None, timeout=60)
    assert stopped.hypervisor_id == source  # a stopped VM keeps its room
    client.start_vm(vm.id)
    client.wait_for_vm(vm.id, until=lambda v: v.status is VmStatus.RUNNING and v.task is None, timeout=60)

    asked = client.migrate_vm(vm.id, target_host=other)
    assert asked.migrations == 1
    moved = client.wait_for_vm(
        vm.id, until=lambda v: v.status is VmStatus.RUNNING and v.hypervisor_id == other, timeout=60
    )
    assert moved.migrations == 1

    drain = client.drain_host(other, DrainRequest(deadline_s=60))
    assert drain.host_id == other
    try:
        wait_for(lambda: client.get_drain(other).state is DrainState.DRAINED, 60, f"{other} drained", interval=0.5)
        drained = client.get_drain(other)
        assert vm.id in {m.vm_id for m in drained.moved}
        assert client.get_vm(vm.id).hypervisor_id == source
    finally:
        client.end_drain(other)
    assert not client.get_host(other).scheduling_paused  # the drain's end: it takes VMs again
    client.delete_vm(vm.id)


def test_simulate_and_capacity_read_the_live_fleet_and_change_nothing(client: Client, fleet: Fleet) -> None:
    shaped = [small(f"{fleet.suite}-imagined-{n}", fleet) for n in range(2)]
    answer = client.simulate(SimulationRequest(vms=shaped))
    assert (answer.placed, answer.unplaced) == (2, 0)
    assert {p.host for p in answer.placements} <= set(fleet.hosts)
    gone = client.simulate(SimulationRequest(vms=shaped[:1], without_hosts=fleet.hosts))
    assert gone.unplaced == 1
    assert gone.placements[0].host is None
    assert gone.placements[0].reason is not None
    assert not [vm for vm in client.list_vms() if vm.name.startswith(f"{fleet.suite}-imagined")]  # nothing made

    room = client.capacity(cpu=1, memory_mb=256, disk_gb=1)
    assert (room.shape.cpu, room.shape.memory_mb) == (1, 256)
    mine = {host.host: host.fits for host in room.hosts if host.host in fleet.hosts}
    assert set(mine) == set(fleet.hosts)
    assert all(fits >= 1 for fits in mine.values())
    assert room.total >= sum(mine.values())
    with pytest.raises(Invalid):
        client.capacity(cpu=0)


def only_ours(fleet: Fleet) -> list[HostSelectorTerm]:
    return [HostSelectorTerm(key="suite", operator=SelectorOperator.IN, values=[fleet.suite])]


def test_a_placed_vms_decision_replays_to_the_same_host(client: Client, fleet: Fleet) -> None:
    vm = client.create_vm(small(f"{fleet.suite}-replayed", fleet))
    placed = client.wait_for_vm(vm.id, timeout=60)
    try:
        replay = client.replay_placement(vm.id)
        assert replay.vm_id == vm.id
        assert (replay.host, replay.same) == (placed.hypervisor_id, True)
        assert replay.decided_host == placed.hypervisor_id
        assert replay.score == replay.decided_score
        assert replay.usage == "exact"
        other = client.replay_placement(vm.id, strategy=Strategy.BEST_FIT)
        assert other.strategy is Strategy.BEST_FIT
        assert other.usage == "exact"  # best_fit reads no measured usage
        assert other.decided_host == placed.hypervisor_id  # the recorded decision is what it was
        with pytest.raises(NotFound):
            client.replay_placement(uuid.uuid4())
    finally:
        client.delete_vm(vm.id)


def settled(plan: RebalancePlan) -> bool:
    return plan.state is PlanState.DONE and all(m.state in (MoveState.MOVED, MoveState.SKIPPED) for m in plan.moves)


def test_a_rebalance_plan_is_made_read_and_applied(client: Client, fleet: Fleet) -> None:
    vms = [client.create_vm(small(f"{fleet.suite}-rb{n}", fleet)) for n in range(2)]
    for vm in vms:
        client.wait_for_vm(vm.id, until=lambda v: v.status is VmStatus.RUNNING, timeout=60)
    try:
        plan = client.create_rebalance_plan(Goal.SPREAD, max_moves=3, host_selector=only_ours(fleet))
        assert (plan.goal, plan.state, plan.max_moves, plan.max_parallel) == (Goal.SPREAD, PlanState.PLANNED, 3, None)
        assert plan.host_selector == only_ours(fleet)
        assert plan.score == "stddev_weighted_utilisation"
        assert plan.score_after <= plan.score_before
        assert len(plan.moves) <= 3
        assert all({m.source, m.to} <= set(fleet.hosts) and m.state is MoveState.QUEUED for m in plan.moves)
        assert plan.progress[MoveState.QUEUED] == len(plan.moves)
        assert client.get_rebalance_plan(plan.id) == plan
        # Listed newest first, as the API serves it, a page at a time.
        assert next(client.list_rebalance_plans()) == plan
        assert plan in itertools.islice(client.list_rebalance_plans(page_size=1), 3)

        applying = client.apply_rebalance_plan(plan.id, max_parallel=2)
        assert (applying.id, applying.max_parallel) == (plan.id, 2)
        assert applying.state in (PlanState.APPLYING, PlanState.DONE)
        with pytest.raises(Conflict):
            client.apply_rebalance_plan(plan.id)
        wait_for(lambda: settled(client.get_rebalance_plan(plan.id)), 90, "the plan applied", interval=0.5)
        done = client.get_rebalance_plan(plan.id)
        assert sum(done.progress.values()) == len(plan.moves)
        assert done.created_at == plan.created_at
        assert done.applied_at is not None
        assert done.ended_at is not None
        assert [m.vm_id for m in done.moves] == [m.vm_id for m in plan.moves]

        packing = client.create_rebalance_plan(Goal.PACK, host_selector=only_ours(fleet))
        assert (packing.goal, packing.score, packing.max_moves) == (Goal.PACK, "empty_hosts", 50)
        with pytest.raises(NotFound):
            client.get_rebalance_plan(uuid.uuid4())
        with pytest.raises(Invalid):
            client.send(Call("POST", "/v1/rebalance/plans", lambda r: None, body={"goal": "sideways"}))
    finally:
        for vm in vms:
            client.delete_vm(vm.id)


async def _first(plans: AsyncIterator[RebalancePlan], count: int) -> AsyncIterator[RebalancePlan]:
    async for plan in plans:
        if count == 0:
            return
        count -= 1
        yield plan


async def test_the_asyncio_client_plans_applies_and_replays(stack: Stack, fleet: Fleet) -> None:
    async with AsyncClient(stack.api_url, stack.token) as client:
        vm = await client.create_vm(small(f"{fleet.suite}-arb", fleet))
        placed = await client.wait_for_vm(vm.id, until=lambda v: v.status is VmStatus.RUNNING, timeout=60)
        try:
            replay = await client.replay_placement(vm.id)
            assert (replay.host, replay.same) == (placed.hypervisor_id, True)
            plan = await client.create_rebalance_plan(Goal.PACK, max_moves=2, host_selector=only_ours(fleet))
            assert plan.state is PlanState.PLANNED
            assert await client.get_rebalance_plan(plan.id) == plan
            newest = [listed async for listed in _first(client.list_rebalance_plans(page_size=1), 3)]
            assert newest[0] == plan
            assert [p.created_at for p in newest] == sorted((p.created_at for p in newest), reverse=True)
            applying = await client.apply_rebalance_plan(plan.id, max_parallel=1)
            assert (applying.id, applying.max_parallel) == (plan.id, 1)

            async def read() -> RebalancePlan:
                return await client.get_rebalance_plan(plan.id)

            done = await eventually(read, settled, timeout=90, what="the plan applied")
            assert sum(done.progress.values()) == len(plan.moves)
        finally:
            await client.delete_vm(vm.id)
