"""vmsched_client against the real stack: every method of the blocking and the asyncio client, the
answers parsed into the API's own models, refusals raised as the error of their status."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid

import pytest

from devtools.stack import Stack, wait_for
from tests.fleets import credentials_file
from tests.integration.client.conftest import Fleet, small
from tests.servers import Servers
from vmsched_client import PLACED, AsyncClient, Client, Conflict, Forbidden, Invalid, NotFound, Unauthorized
from vmsched_client.calls import Call, create_vm
from vmsched_client.sse import Event
from vmsched_contract.api import (
    HostPatch,
    ProjectRequest,
    Quota,
    ServerGroupRequest,
    TokenRequest,
    Vm,
    VmBatchRequest,
    VmRequest,
)
from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import VmAssigned
from vmsched_contract.scopes import Scope
from vmsched_contract.status import VmStatus


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
