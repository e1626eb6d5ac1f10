"""vmsched_client against the real stack: every method of the blocking and the asyncio client, the
answers parsed into the API's own models, refusals raised as the error of their status."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import pytest

from devtools.stack import Stack, wait_for
from tests.fleets import credentials_file
from tests.integration.client.conftest import Fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_client import PLACED, AsyncClient, Client, Conflict, Forbidden, Invalid, NotFound, Unauthorized
from vmsched_client.calls import Call, create_vm
from vmsched_client.sse import Event
from vmsched_contract.api import (
    DrainRequest,
    HostPatch,
    ProjectRequest,
    Quota,
    Reservation,
    ReservationRequest,
    ServerGroupRequest,
    TokenRequest,
    Vm,
    VmBatchRequest,
    VmRequest,
)
from vmsched_contract.fencing import FencedBy
from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import HostSelectorTerm, HostStatus, SelectorOperator, VmAssigned
from vmsched_contract.rebalance import Goal, MoveState, PlanState, RebalancePlan
from vmsched_contract.scopes import Scope
from vmsched_contract.status import DrainState, ReservationStatus, VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_contract.whatif import SimulationRequest

pytestmark = pytest.mark.integration


def small(name: str, fleet: Fleet, **more: object) -> VmRequest:
    return VmRequest.model_validate(
        {"name": name, "cpu": 1, "memory_mb": 256, "disk_gb": 1, "labels": fleet.selector, **more}
    )


def test_a_vm_is_created_placed_explained_listed_by_pages_and_deleted(client: Client, fleet: Fleet) -> None:
    vm = client.create_vm(small(f"{fleet.suite}-one", fleet), idempotency_key=f"{fleet.suite}-one")
    assert isinstance(vm, Vm)
    assert vm.status is VmStatus.PENDING
    again = client.create_vm(small(f"{fleet.suite}-one", fleet), idempotency_key=f"{fleet.suite}-one")
    assert again.id == vm.id  # the same key: the same VM

    placed = client.wait_for_vm(vm.id, timeout=60)
    assert placed.status in PLACED
    assert placed.hypervisor_id in fleet.hosts
    assert client.get_vm(vm.id).id == vm.id
    placement = client.get_placement(vm.id)
    assert placement.decision is not None
    assert placement.decision.host == placed.hypervisor_id

    batch = client.create_vms(VmBatchRequest(vms=[small(f"{fleet.suite}-b{n}", fleet) for n in range(3)]))
    assert len(batch) == 3
    settled = [client.wait_for_vm(b.id, timeout=60) for b in batch]
    mine = {v.id for v in [placed, *settled]}
    seen = [v.id for host in fleet.hosts for v in client.list_vms(hypervisor_id=host, page_size=1)]
    assert len(seen) == len(set(seen)), "a VM came twice across pages"
    assert mine <= set(seen)

    client.delete_vm(vm.id)
    gone = client.wait_for_vm(vm.id, until=lambda v: v.status is VmStatus.DELETED, timeout=60)
    assert gone.status is VmStatus.DELETED
    for other in settled:
        client.delete_vm(other.id)


def test_an_unschedulable_vms_placement_names_the_rule(client: Client, fleet: Fleet) -> None:
    nowhere = client.create_vm(small(f"{fleet.suite}-huge", fleet, cpu=1024, wait_s=0))
    ended = client.wait_for_vm(nowhere.id, timeout=60)
    assert ended.status is VmStatus.UNSCHEDULABLE
    decision = client.get_placement(nowhere.id).decision
    assert decision is not None
    assert decision.host is None
    assert decision.rejections, decision


def test_refusals_raise_the_error_of_their_status(client: Client, stack: Stack) -> None:
    with pytest.raises(NotFound):
        client.get_vm(uuid.uuid4())
    # A body the model would refuse, sent anyway (model_construct skips validation): the API's 422.
    bad = create_vm(VmRequest.model_construct(name="not a name!", disk_gb=1))
    with pytest.raises(Invalid, match="name"):
        client.send(bad)
    with Client(stack.api_url, "not-a-token") as stranger, pytest.raises(Unauthorized):
        stranger.get_vm(uuid.uuid4())
    assert client.send(Call("GET", "/healthz", lambda r: r.json())) == client.health() == {"status": "ok"}


def test_hosts_are_cordoned_uncordoned_labelled_and_explained(client: Client, fleet: Fleet) -> None:
    first, second = fleet.hosts
    assert {h.id for h in client.list_hosts()} >= set(fleet.hosts)
    assert client.get_host(first).id == first
    assert client.pause_host(first).scheduling_paused
    try:
        vm = client.wait_for_vm(client.create_vm(small(f"{fleet.suite}-cordon", fleet)).id, timeout=60)
        assert vm.hypervisor_id == second  # the cordoned host took nothing
    finally:
        assert not client.resume_host(first).scheduling_paused
    labelled = client.update_host(first, HostPatch(labels={"tier": "gold"}))
    assert labelled.labels["tier"] == "gold"
    assert "tier" not in client.update_host(first, HostPatch(labels={"tier": None})).labels
    assert first in client.scheduling_info(first)
    with pytest.raises(Conflict):
        client.delete_host(second)  # it holds a VM
    with pytest.raises(NotFound):
        client.delete_host(f"{fleet.suite}-nosuch")
    client.delete_vm(vm.id)


def test_a_silent_host_is_deleted(
    client: Client, stack: Stack, servers: Servers, fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> None:
    host = f"{fleet.suite}-gone-0001"
    credentials = credentials_file(servers, [host], tmp_path_factory.mktemp("gone") / "agent.jsonl")
    agent = stack.start_agents(
        f"agent-{host}", "--count", "1", "--prefix", f"{fleet.suite}-gone", "--credentials", str(credentials)
    )
    wait_for(lambda: any(h.id == host for h in client.list_hosts()), 60, f"{host} known", interval=0.2)
    agent.stop()
    # Once its last heartbeat is folded (one still in flight would declare the host again).
    beats: list[object] = []

    def silent() -> bool:
        beats.append(client.get_host(host).last_heartbeat)
        return len(beats) >= 6 and len(set(map(str, beats[-6:]))) == 1

    wait_for(silent, 60, f"{host} silent", interval=0.5)
    client.delete_host(host)
    with pytest.raises(NotFound):
        client.get_host(host)


def test_a_host_is_fenced_and_unfenced(
    client: Client, stack: Stack, servers: Servers, fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> None:
    host = f"{fleet.suite}-fence-0001"
    credentials = credentials_file(servers, [host], tmp_path_factory.mktemp("fence") / "agent.jsonl")
    agent = stack.start_agents(
        f"agent-{host}", "--count", "1", "--prefix", f"{fleet.suite}-fence", "--credentials", str(credentials)
    )
    try:
        wait_for(
            lambda: any(h.id == host and h.status is HostStatus.ONLINE for h in client.list_hosts()),
            60,
            f"{host} online",
            interval=0.2,
        )
        fenced = client.fence_host(host)
        assert (fenced.status, fenced.fenced_by) == (HostStatus.FENCED, FencedBy.OPERATOR)
        assert fenced.fenced_at is not None
        # Its agent still heartbeats: it stays fenced.
        wait_for(lambda: client.get_host(host).last_heartbeat != fenced.last_heartbeat, 30, "a heartbeat", interval=0.2)
        assert client.get_host(host).status is HostStatus.FENCED
        unfenced = client.unfence_host(host)
        assert (unfenced.status, unfenced.fenced_at, unfenced.fenced_by) == (HostStatus.ONLINE, None, None)
        with pytest.raises(Conflict):
            client.unfence_host(host)
        with pytest.raises(NotFound):
            client.fence_host(f"{fleet.suite}-nosuch")
    finally:
        agent.stop()


def test_groups_projects_tokens_audit_and_settings(client: Client, stack: Stack, fleet: Fleet) -> None:
    group = client.create_server_group(ServerGroupRequest(name=f"{fleet.suite}-g", policy=GroupPolicy.ANTI_AFFINITY))
    assert group.id in {g.id for g in client.list_server_groups()}
    assert client.get_server_group(group.id).policy is GroupPolicy.ANTI_AFFINITY
    client.delete_server_group(group.id)
    with pytest.raises(NotFound):
        client.get_server_group(group.id)

    name = f"p{uuid.uuid4().hex[:8]}"
    project = client.create_project(ProjectRequest(name=name, quota=Quota(instances=1)))
    assert project.quota.instances == 1
    assert name in {p.name for p in client.list_projects()}
    assert client.get_project(name).usage.instances == 0

    created = client.create_token(TokenRequest(name="ci", project=name, scopes=[Scope.VMS_READ, Scope.VMS_WRITE]))
    assert created.token
    assert created.id in {t.id for t in client.list_tokens(project=name)}
    assert client.get_token(created.id).revoked_at is None
    with Client(stack.api_url, created.token) as member:
        vm = member.create_vm(small(f"{fleet.suite}-quota", fleet))
        assert vm.project == name
        with pytest.raises(Forbidden, match="quota"):
            member.create_vm(small(f"{fleet.suite}-quota2", fleet))
        assert [v.id for v in member.list_vms()] == [vm.id]  # its project's VMs only
        member.delete_vm(vm.id)
        client.revoke_token(created.id)
        with pytest.raises(Unauthorized):
            member.get_vm(vm.id)

    recent = list(itertools.islice(client.list_audit(page_size=2), 20))
    assert len(recent) == len({r.id for r in recent}) > 2  # more than one page, none twice
    assert any(r.action == "POST /v1/tokens" for r in recent)

    current = client.get_scheduler_settings()
    assert client.set_default_strategy(current.default_strategy).default_strategy is current.default_strategy


async def test_the_asyncio_client_does_the_same(stack: Stack, fleet: Fleet) -> None:
    async with AsyncClient(stack.api_url, stack.token) as client:
        vm = await client.create_vm(small(f"{fleet.suite}-async", fleet))
        placed = await client.wait_for_vm(vm.id, timeout=60)
        assert placed.hypervisor_id in fleet.hosts
        assert (await client.get_vm(vm.id)).id == vm.id
        decision = (await client.get_placement(vm.id)).decision
        assert decision is not None
        assert decision.host == placed.hypervisor_id
        batch = await client.create_vms(VmBatchRequest(vms=[small(f"{fleet.suite}-ab{n}", fleet) for n in range(2)]))
        listed = [v.id async for v in client.list_vms(status=VmStatus.PENDING, page_size=1)]
        listed += [v.id async for v in client.list_vms(hypervisor_id=placed.hypervisor_id, page_size=1)]
        assert vm.id in listed

        host = placed.hypervisor_id
        assert host is not None
        assert host in {h.id for h in await client.list_hosts()}
        assert (await client.get_host(host)).vm_count >= 1
        assert (await client.pause_host(host)).scheduling_paused
        assert not (await client.resume_host(host)).scheduling_paused
        assert (await client.update_host(host, HostPatch(scheduling_paused=False))).id == host
        assert host in await client.scheduling_info(host)
        with pytest.raises(Conflict):
            await client.delete_host(host)

        group = await client.create_server_group(
            ServerGroupRequest(name=f"{fleet.suite}-ag", policy=GroupPolicy.SPREAD)
        )
        assert group.id in {g.id for g in await client.list_server_groups()}
        assert (await client.get_server_group(group.id)).name == group.name
        await client.delete_server_group(group.id)

        name = f"a{uuid.uuid4().hex[:8]}"
        await client.create_project(ProjectRequest(name=name))
        assert name in {p.name for p in await client.list_projects()}
        assert (await client.get_project(name)).name == name
        token = await client.create_token(TokenRequest(name="ci", project=name, scopes=[Scope.VMS_READ]))
        assert token.id in {t.id for t in await client.list_tokens()}
        assert (await client.get_token(token.id)).name == "ci"
        await client.revoke_token(token.id)
        assert (await client.get_token(token.id)).revoked_at is not None
        audit = []
        async for record in client.list_audit(page_size=3):
            audit.append(record.id)
            if len(audit) == 10:
                break
        assert len(audit) == len(set(audit)) == 10

        current = await client.get_scheduler_settings()
        assert (await client.set_default_strategy(current.default_strategy)).source == "runtime"
        assert await client.health() == {"status": "ok"}

        for each in [vm, *batch]:
            await client.delete_vm(each.id)
        gone = await client.wait_for_vm(vm.id, until=lambda v: v.status is VmStatus.DELETED, timeout=60)
        assert gone.status is VmStatus.DELETED


def reservation_on(fleet: Fleet, project: str, count: int) -> ReservationRequest:
    """Slots the size of :func:`small`'s VMs on the suite's hosts; they end by themselves if a test
    fails before it ends them (other tests share the hosts)."""
    return ReservationRequest(
        project=project,
        cpu=1,
        memory_mb=256,
        disk_gb=1,
        count=count,
        host_selector=[HostSelectorTerm(key="suite", operator=SelectorOperator.IN, values=[fleet.suite])],
        ends_at=datetime.now(UTC) + timedelta(minutes=5),
    )


def placed(get: Callable[[], Reservation]) -> Reservation:
    seen: list[Reservation] = []

    def decided() -> bool:
        seen.append(get())
        return seen[-1].status is not ReservationStatus.PENDING

    wait_for(decided, 60, "the reservation placed", interval=0.2)
    return seen[-1]


def test_a_reservation_is_held_taken_by_its_projects_vm_listed_and_released(
    client: Client, stack: Stack, fleet: Fleet
) -> None:
    name = f"r{uuid.uuid4().hex[:8]}"
    client.create_project(ProjectRequest(name=name))
    created = client.create_reservation(reservation_on(fleet, name, count=2))
    try:
        assert (created.status, created.project, created.count) == (ReservationStatus.PENDING, name, 2)
        held = placed(lambda: client.get_reservation(created.id))
        assert (held.status, held.held, held.used) == (ReservationStatus.HELD, 2, 0), held
        assert set(held.hosts) <= set(fleet.hosts)
        assert created.id in {r.id for r in client.list_reservations(project=name)}

        token = client.create_token(TokenRequest(name="ci", project=name, scopes=[Scope.VMS_READ, Scope.VMS_WRITE]))
        with Client(stack.api_url, token.token) as member:
            assert [r.id for r in member.list_reservations()] == [created.id]  # its project's only
            vm = member.wait_for_vm(
                member.create_vm(small(f"{fleet.suite}-reserved", fleet, reservation=str(created.id))).id, timeout=60
            )
            assert vm.status in PLACED, vm
            assert (vm.reservation, vm.hypervisor_id in held.hosts) == (created.id, True)
            taken = member.get_reservation(created.id)
            assert (taken.held, taken.used) == (1, 1)
            with pytest.raises(Forbidden):
                member.delete_reservation(created.id)  # an admin ends it
            member.delete_vm(vm.id)
    finally:
        ended = client.delete_reservation(created.id)
    assert (ended.status, ended.held) == (ReservationStatus.RELEASED, 0)
    with pytest.raises(NotFound):
        client.get_reservation(uuid.uuid4())


async def test_the_asyncio_client_holds_and_releases_a_reservation(stack: Stack, fleet: Fleet) -> None:
    async with AsyncClient(stack.api_url, stack.token) as client:
        name = f"r{uuid.uuid4().hex[:8]}"
        await client.create_project(ProjectRequest(name=name))
        created = await client.create_reservation(reservation_on(fleet, name, count=1))
        try:
            assert created.id in {r.id for r in await client.list_reservations(project=name)}
            seen = await eventually(
                lambda: client.get_reservation(created.id),
                lambda r: r.status is not ReservationStatus.PENDING,
                timeout=60,
                what="the reservation placed",
            )
            assert (seen.status, seen.held) == (ReservationStatus.HELD, 1), seen
        finally:
            ended = await client.delete_reservation(created.id)
        assert ended.status is ReservationStatus.RELEASED


async def test_watch_receives_a_vms_assignment_from_the_real_event_stream(stack: Stack, fleet: Fleet) -> None:
    """watch() against GET /v1/events: once connected (on_connect), a VM created then is seen placed,
    its vm.assigned parsed into the contract's model, with the event's id (the stream's offset)."""
    connected = asyncio.Event()
    events: asyncio.Queue[Event] = asyncio.Queue()
    async with AsyncClient(stack.api_url, stack.token, timeout=30) as client:

        async def follow() -> None:
            async for event in client.watch(types=["vm.assigned"], on_connect=connected.set):
                events.put_nowait(event)

        watching = asyncio.create_task(follow())
        try:
            async with asyncio.timeout(30):
                await asyncio.wait({watching, asyncio.ensure_future(connected.wait())}, return_when="FIRST_COMPLETED")
            if watching.done():
                watching.result()  # it ended before connecting: its error
            vm = await client.create_vm(small(f"{fleet.suite}-watched", fleet))
            async with asyncio.timeout(60):
                while True:
                    event = await events.get()
                    assert event.type == "vm.assigned"
                    assigned = event.parse(VmAssigned)
                    mine = [a for a in assigned.assignments if a.vm_id == vm.id]
                    if mine:
                        break
            assert mine[0].hypervisor_id in fleet.hosts
            assert event.id is not None
            assert event.id.isdigit()
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        await client.delete_vm(vm.id)


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
