"""GET /v1/events on the real stack: VM events arrive as server-sent events, filtered by type and by
project (a project's token sees its own VMs only), and a client that reconnects to another API
replica with Last-Event-ID gets exactly the events it missed; no token is 401, no scope 403."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from devtools.stack import Stack, api_client
from tests.fleets import enrolled_fleet
from tests.integration.test_identity import new_project, new_token, vm
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import Resources

WAIT = 30.0


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    type: str
    data: dict[str, Any]

    def vm_ids(self) -> set[str]:
        listed = self.data.get("vms") or self.data.get("assignments") or [self.data]
        return {str(item["vm_id"]) for item in listed if "vm_id" in item}


@dataclass
class EventReader:
    """A client of GET /v1/events, parsing what it reads into :attr:`events`."""

    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, client: httpx.AsyncClient, params: dict[str, Any], headers: dict[str, str]) -> None:
        async with client.stream("GET", "/v1/events", params=params, headers=headers) as answer:
            assert answer.status_code == 200, await answer.aread()
            assert answer.headers["content-type"].startswith("text/event-stream")
            fields: dict[str, str] = {}
            async for line in answer.aiter_lines():
                if line.startswith(":"):
                    self.connected.set()  # the server's first comment: its consumer is in place
                elif line == "":
                    if fields:
                        self.events.put_nowait(Event(int(fields["id"]), fields["event"], json.loads(fields["data"])))
                    fields = {}
                else:
                    name, _, value = line.partition(": ")
                    fields[name] = value

    async def until(self, done: set[tuple[str, str]]) -> list[Event]:
        """Events until each (type, vm id) of ``done`` was seen; every event read, in order."""
        seen: list[Event] = []
        missing = set(done)
        async with asyncio.timeout(WAIT):
            while missing:
                event = await self.events.get()
                seen.append(event)
                missing -= {(event.type, vm_id) for vm_id in event.vm_ids()}
        return seen


@contextlib.asynccontextmanager
async def following(
    api_url: str, token: str, params: dict[str, Any] | None = None, last_event_id: int | None = None
) -> AsyncIterator[EventReader]:
    reader = EventReader()
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    async with api_client(api_url, token, timeout=httpx.Timeout(30, read=None)) as client:
        task = asyncio.create_task(reader.read(client, params or {}, headers))
        try:
            async with asyncio.timeout(WAIT):
                await asyncio.wait(
                    {task, asyncio.ensure_future(reader.connected.wait())}, return_when="FIRST_COMPLETED"
                )
            if task.done():
                task.result()
            assert reader.connected.is_set()
            yield reader
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _create(api_url: str, token: str, name: str) -> str:
    async with api_client(api_url, token, timeout=30) as api:
        created = await api.post("/v1/vms", json=vm(name))
        assert created.status_code == 202, created.text
        vm_id: str = created.json()["id"]
        return vm_id


def _decided(*vm_ids: str) -> set[tuple[str, str]]:
    return {(kind, vm_id) for vm_id in vm_ids for kind in ("vm.create", "vm.unschedulable")}


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


async def test_a_projects_token_follows_its_own_vms_events_only_and_types_filter(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    mine, theirs = await new_project(admin), await new_project(admin)
    my_token = (await new_token(admin, mine, "vms:write"))["token"]
    their_token = (await new_token(admin, theirs, "vms:write"))["token"]
    async with (
        following(stack.api_url, my_token) as everything_of_mine,
        following(stack.api_url, my_token, {"type": "vm.unschedulable"}) as unschedulable_only,
        following(stack.api_url, stack.token, {"project": theirs}) as admin_on_theirs,
    ):
        their_vm = await _create(stack.api_url, their_token, "theirs-1")
        my_vm = await _create(stack.api_url, my_token, "mine-1")
        last_of_theirs = await _create(stack.api_url, their_token, "theirs-2")

        seen = await everything_of_mine.until(_decided(my_vm))
        assert {vm_id for event in seen for vm_id in event.vm_ids()} == {my_vm}
        assert all(item["project"] == mine for event in seen for item in event.data["vms"])
        unschedulable = await unschedulable_only.until({("vm.unschedulable", my_vm)})
        assert {event.type for event in unschedulable} == {"vm.unschedulable"}
        # Whichever host the run's other tests left online, none carries the label: no host takes it.
        assert unschedulable[-1].data["vms"][0]["reason"] in {"labels", "no_available_agents"}

        # An admin may pick a project; it then sees that project's VMs only.
        theirs_seen = await admin_on_theirs.until(_decided(their_vm, last_of_theirs))
        assert {vm_id for event in theirs_seen for vm_id in event.vm_ids()} == {their_vm, last_of_theirs}
        # Ids are the stream's offsets: they grow.
        ids = [event.id for event in theirs_seen]
        assert ids == sorted(set(ids))


async def test_a_placement_arrives_with_its_host(stack: Stack, servers: Servers, admin: httpx.AsyncClient) -> None:
    suite = f"sse-{uuid.uuid4().hex[:6]}"
    host_id = f"{suite}-h"
    project = await new_project(admin)
    token = (await new_token(admin, project, "vms:write"))["token"]
    fleet = await enrolled_fleet(
        servers,
        [HostSpec(id=host_id, capacity=Resources(cpu=4, memory_mb=8192, disk_gb=50), labels={"suite": suite})],
        heartbeat_interval=1.0,
    )
    async with fleet:
        await eventually(
            lambda: admin.get(f"/v1/hosts/{host_id}"),
            lambda r: r.status_code == 200 and r.json()["status"] == "online",
            timeout=30,
            what=f"{host_id} online",
        )
        async with following(stack.api_url, token, {"type": "vm.assigned"}) as placements:
            async with api_client(stack.api_url, token, timeout=30) as api:
                created = await api.post("/v1/vms", json={**vm("placed"), "labels": {"suite": suite}})
                assert created.status_code == 202, created.text
            vm_id = created.json()["id"]
            (event,) = await placements.until({("vm.assigned", vm_id)})
    (assignment,) = event.data["assignments"]
    assert (assignment["hypervisor_id"], assignment["project"]) == (host_id, project)


async def test_last_event_id_on_another_replica_gets_exactly_the_missed_events(
    stack: Stack, replica: Stack, admin: httpx.AsyncClient
) -> None:
    project = await new_project(admin)
    token = (await new_token(admin, project, "vms:write"))["token"]
    async with following(stack.api_url, token) as first:
        before = await _create(stack.api_url, token, "before")
        seen = await first.until(_decided(before))
    last_id = seen[-1].id
    missed = [await _create(stack.api_url, token, f"missed-{i}") for i in range(3)]
    # Wait until the missed VMs are decided, so that their events are in the stream.
    async with following(stack.api_url, token, last_event_id=last_id) as probe:
        await probe.until(_decided(*missed))
    async with following(replica.api_url, token, last_event_id=last_id) as resumed:
        again = await resumed.until(_decided(*missed))
        sentinel = await _create(stack.api_url, token, "sentinel")
        after = await resumed.until(_decided(sentinel))
    replayed = [event for event in again + after if not event.vm_ids() & {sentinel}]
    assert sorted((e.type, vm_id) for e in replayed for vm_id in e.vm_ids()) == sorted(_decided(*missed))
    assert all(event.id > last_id for event in again)


async def test_events_need_a_token_with_vms_read(stack: Stack, admin: httpx.AsyncClient) -> None:
    project = await new_project(admin)
    hosts_only = (await new_token(admin, project, "hosts:read"))["token"]
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as anonymous:
        assert (await anonymous.get("/v1/events")).status_code == 401
    async with api_client(stack.api_url, hosts_only, timeout=30) as api:
        refused = await api.get("/v1/events")
        assert refused.status_code == 403
        assert 'scope="vms:read"' in refused.headers["WWW-Authenticate"]
    async with api_client(stack.api_url, stack.token, timeout=30) as api:
        assert (await api.get("/v1/events", headers={"Last-Event-ID": "soon"})).status_code == 422
