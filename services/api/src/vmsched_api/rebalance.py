"""Rebalancing plans on live state (docs/operations.md, "Rebalance the fleet"): moves of running VMs
that even out the fleet (``spread``) or empty hosts (``pack``), computed by the placement engine.

As what-if does (``vmsched_api.whatif``): the capacity snapshot is read into this request's own fleet;
the VMs that may move (every running VM, with its selector, tolerations and server group) are read
from PostgreSQL; ``vmsched_placement.rebalance`` plans on the copy. Nothing moves until the plan is
applied; the plan is stored so that it can be read and applied later.
"""

from __future__ import annotations

import time

from redis.exceptions import RedisError

from vmsched_api.deps import Services
from vmsched_api.whatif import SnapshotUnavailable, decision_context, default_strategy, live_fleet
from vmsched_contract.messages import HostSelectorTerm
from vmsched_contract.rebalance import Goal, MoveState, PlannedMove, PlanRequest, RebalancePlan
from vmsched_domain.rebalance_steps import MoveProgress
from vmsched_domain.selectors import holds
from vmsched_pg.rebalance_plans import RebalanceStore, StoredMove, StoredPlan
from vmsched_placement.inputs import placement_request
from vmsched_placement.rebalance import MovableVm, plan_rebalance

SCORES = {Goal.SPREAD: "stddev_weighted_utilisation", Goal.PACK: "empty_hosts"}


def to_plan(stored: StoredPlan) -> RebalancePlan:
    goal = Goal(stored.goal)
    known = {vm_id: MoveProgress.of(p) for vm_id, p in stored.progress.items()}
    queued = MoveProgress(MoveState.QUEUED)
    moves = [
        PlannedMove(
            vm_id=m.vm_id,
            source=m.source,
            to=m.target,
            gain=m.gain,
            state=known.get(m.vm_id, queued).state,
            reason=known.get(m.vm_id, queued).reason,
        )
        for m in stored.moves
    ]
    return RebalancePlan(
        id=stored.id,
        goal=goal,
        state=stored.state,
        max_moves=stored.max_moves,
        host_selector=[HostSelectorTerm.model_validate(term) for term in stored.host_selector],
        score=SCORES[goal],
        score_before=stored.score_before,
        score_after=stored.score_after,
        moves=moves,
        max_parallel=stored.max_parallel,
        progress={each: sum(1 for m in moves if m.state is each) for each in MoveState},
        created_at=stored.created_at,
        applied_at=stored.applied_at,
        ended_at=stored.ended_at,
    )


async def create_plan(services: Services, body: PlanRequest) -> StoredPlan:
    """Plan on a copy of the live fleet and store the plan (raises ``SnapshotUnavailable``)."""
    fleet = await live_fleet(services)
    store = RebalanceStore(services.engine)
    records = [vm for vm in await store.running_vms() if vm.hypervisor_id is not None and vm.hypervisor_id in fleet]
    rules = await store.group_rules(sorted({vm.server_group for vm in records if vm.server_group is not None}))
    strategy = await default_strategy(services)
    now = time.time()
    vms = [
        MovableVm(
            placement_request(vm.to_place(now), strategy),
            vm.hypervisor_id,
            None if vm.server_group is None else rules.get(vm.server_group),
        )
        for vm in records
        if vm.hypervisor_id is not None
    ]
    hosts = None
    if body.host_selector:
        hosts = [host.id for host in fleet if all(holds(term, host.labels) for term in body.host_selector)]
    try:
        # Every member of the groups, whatever its status (a stopped one holds its domain too), as
        # the schedulers count them.
        members = await services.snapshot.group_members(sorted(rules))
    except (RedisError, OSError) as error:
        raise SnapshotUnavailable(f"the capacity snapshot cannot be read: {error}") from error
    plan = plan_rebalance(
        fleet,
        vms,
        body.goal,
        decision_context(services),
        max_moves=body.max_moves,
        hosts=hosts,
        group_members=members,
    )
    return await store.create(
        goal=body.goal.value,
        max_moves=body.max_moves,
        host_selector=[term.model_dump(mode="json") for term in body.host_selector],
        moves=[StoredMove(m.vm_id, m.source, m.target, m.gain) for m in plan.moves],
        score_before=plan.score_before,
        score_after=plan.score_after,
    )
