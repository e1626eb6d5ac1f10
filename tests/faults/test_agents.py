"""Agents that go away or say no. A host silent for a while (a network blip) keeps its VMs: they are
``unknown``, then ``running`` again when it is back, nothing failed or deleted. A host lost for good
(silent past VMSCHED_AGENT_LOST_TIMEOUT) has its VMs failed and, with ``on_failure``, placed elsewhere;
when it comes back it is told to delete only the copies of the VMs that moved. A rejected create is
retried on another host, that host excluded, up to VMSCHED_MAX_ATTEMPTS. An agent process restarted after
a crash gets its host back once the dead one has been silent for the offline timeout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from devtools.stack import Stack
from tests.faults.conftest import fault_stack, wait_settled
from tests.faults.invariants import check
from tests.fleets import enroll, enrolled_fleet
from tests.integration.amqp_tools import Tap
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec, generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology
from vmsched_contract.messages import AgentCommand, CommandAction, Resources

pytestmark = pytest.mark.slow

OFFLINE_TIMEOUT = 3.0
LOST_TIMEOUT = 25.0
BLIP = 20.0  # a silence longer than the offline timeout and shorter than the lost one
HEARTBEAT = 0.5
HOST = Resources(cpu=32, memory_mb=64 * 1024, disk_gb=1000)


@pytest.fixture(scope="module")
def agents_stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(
        servers,
        Path(tmp_path_factory.mktemp("agent-fault-logs")),
        schedulers=1,
        VMSCHED_AGENT_OFFLINE_TIMEOUT=str(OFFLINE_TIMEOUT),
        VMSCHED_AGENT_LOST_TIMEOUT=str(LOST_TIMEOUT),
        VMSCHED_RESTART_DELAY="1",
        VMSCHED_MAX_ATTEMPTS="3",
        VMSCHED_RESEND_STALE_AFTER="3",
    ) as stack:
        yield stack


@pytest.fixture
async def api(agents_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with agents_stack.async_client(timeout=30) as client:
        yield client


@contextlib.asynccontextmanager
async def fleet(
    servers: Servers,
    api: httpx.AsyncClient,
    prefix: str,
    count: int,
    labels: dict[str, str],
    *,
    fail_rate: float = 0.0,
    capacity: Resources = HOST,
) -> AsyncIterator[SimulatedFleet]:
    hosts = generate_hosts(count, prefix=prefix, capacity=capacity, labels=labels)
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=HEARTBEAT, fail_rate=fail_rate) as simulated:
        ids = {host.id for host in hosts}
        await eventually(
            lambda: api.get("/v1/hosts"),
            lambda r: sum(1 for h in r.json() if h["id"] in ids and h["status"] == "online") == count,
            timeout=30,
            what=f"hosts {sorted(ids)} online",
        )
        yield simulated


async def create(api: httpx.AsyncClient, name: str, labels: dict[str, str], **extra: Any) -> str:
    body = {"name": name, "cpu": 2, "memory_mb": 2048, "disk_gb": 20, "labels": labels, **extra}
    response = await api.post("/v1/vms", json=body)
    assert response.status_code == 202, response.text
    vm_id: str = response.json()["id"]
    return vm_id


async def vm(api: httpx.AsyncClient, vm_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/vms/{vm_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_host_silent_for_a_while_keeps_its_vms_and_nothing_is_failed_or_deleted(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    labels = {"suite": "blip"}
    async with fleet(servers, api, "blip", 1, labels) as simulated:
        restartable = [await create(api, f"blip-r{i}", labels, restart_policy="on_failure") for i in range(3)]
        fragile = [await create(api, f"blip-n{i}", labels) for i in range(2)]
        everyone = restartable + fragile
        await eventually(
            lambda: _statuses(api, everyone), lambda s: s == {"running"}, timeout=30, what="every VM running"
        )
        silent_since = time.monotonic()
        await simulated.cut_off("blip-0001")
        await eventually(
            lambda: _statuses(api, everyone),
            lambda s: s == {"unknown"},
            timeout=OFFLINE_TIMEOUT + 10,
            what="every VM unknown while its host is silent",
        )
        host = (await api.get("/v1/hosts/blip-0001")).json()
        assert (host["status"], host["vm_count"]) == ("offline", len(everyone))  # capacity kept
        # Stay silent for the whole blip, as long as the condition above allows.
        await asyncio.sleep(max(0.0, BLIP - (time.monotonic() - silent_since)))
        assert await _statuses(api, everyone) == {"unknown"}
        await simulated.reconnect("blip-0001")
        await eventually(
            lambda: _statuses(api, everyone), lambda s: s == {"running"}, timeout=30, what="every VM running again"
        )
        for vm_id in everyone:
            body = await vm(api, vm_id)
            assert (body["hypervisor_id"], body["restart_count"], body["attempt"]) == ("blip-0001", 0, 1)
            assert body["attempts"] == []
        commands = simulated.received("blip-0001")
        assert [c.action for c in commands] == [CommandAction.CREATE] * len(everyone)  # no delete
        assert {simulated.host_of(uuid.UUID(vm_id)) for vm_id in everyone} == {"blip-0001"}
        report = await check(servers.asyncpg_dsn, everyone)
    print(f"blip of {BLIP:g}s: {len(everyone)} VMs -> {report.by_status}")
    assert report.problems == []


async def test_a_host_lost_for_good_has_its_vms_placed_elsewhere_and_deletes_only_the_moved_copies(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    labels = {"suite": "agentloss"}
    async with fleet(servers, api, "live", 1, labels) as survivor, fleet(servers, api, "lost", 1, labels) as lost:
        # The survivor is paused while the VMs are created, so all of them land on ``lost``.
        assert (await api.patch("/v1/hosts/live-0001", json={"scheduling_paused": True})).status_code == 200
        restartable = [await create(api, f"loss-r{i}", labels, restart_policy="on_failure") for i in range(4)]
        fragile = [await create(api, f"loss-n{i}", labels) for i in range(2)]
        everyone = restartable + fragile
        await eventually(
            lambda: _statuses(api, everyone), lambda s: s == {"running"}, timeout=30, what="every VM running"
        )
        assert {(await vm(api, v))["hypervisor_id"] for v in everyone} == {"lost-0001"}
        assert (await api.patch("/v1/hosts/live-0001", json={"scheduling_paused": False})).status_code == 200
        await lost.cut_off("lost-0001")  # and it stays away past the lost timeout
        await eventually(
            lambda: _statuses(api, restartable),
            lambda s: s == {"running"},
            timeout=LOST_TIMEOUT + 60,
            what="every on_failure VM running again",
        )
        await eventually(
            lambda: _all_on(api, restartable), lambda hosts: hosts == {"live-0001"}, timeout=30, what="moved"
        )
        for vm_id in restartable:
            body = await vm(api, vm_id)
            assert body["restart_count"] == 1
            assert any(a["host"] == "lost-0001" and a["outcome"] == "agent lost connection" for a in body["attempts"])
        for vm_id in fragile:
            body = await vm(api, vm_id)
            assert body["status"] == "failed"
            assert "agent lost connection" in body["status_reason"]
        created_on_survivor = {str(c.vm_id) for c in survivor.received("live-0001") if c.action is CommandAction.CREATE}
        assert created_on_survivor == set(restartable)
        lost_host = (await api.get("/v1/hosts/lost-0001")).json()
        assert (lost_host["vm_count"], lost_host["allocated"]["cpu"]) == (0, 0)

        # Back it comes, still running all six: the moved ones are deleted there, the failed ones
        # (restart_policy never) are reported and left alone.
        await lost.reconnect("lost-0001")
        await eventually(
            lambda: _async({str(v) for v in lost.agents["lost-0001"].vm_ids}),
            lambda running: running == set(fragile),
            timeout=30,
            what="the moved copies deleted from lost-0001",
        )
        deleted = {str(c.vm_id) for c in lost.received("lost-0001") if c.action is CommandAction.DELETE}
        assert deleted == set(restartable)
        for vm_id in fragile:
            assert (await vm(api, vm_id))["status"] == "failed"
        await wait_settled(servers, everyone, timeout=30)
        report = await check(servers.asyncpg_dsn, everyone)
    print(f"agent lost: {len(everyone)} VMs -> {report.by_status}, moved copies deleted {len(deleted)}")
    assert report.problems == []


async def _all_on(api: httpx.AsyncClient, vm_ids: list[str]) -> set[str | None]:
    return {(await vm(api, vm_id))["hypervisor_id"] for vm_id in vm_ids}


async def _async(value: set[str]) -> set[str]:
    return value


async def _statuses(api: httpx.AsyncClient, vm_ids: list[str]) -> set[str]:
    return {(await vm(api, vm_id))["status"] for vm_id in vm_ids}


async def test_an_agent_restarted_after_a_crash_gets_its_host_back_once_the_dead_process_is_silent_long_enough(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    """The restart case of docs/security.md's rule: a new process (a new instance_id) is refused while
    the one holding the host id is heard from, and takes the host over, by itself, once the old one has
    been silent for VMSCHED_AGENT_OFFLINE_TIMEOUT (a crash sends no goodbye)."""
    host_id = "crash-0001"
    credentials = await enroll(servers, [host_id])
    url = {host_id: credentials[host_id].amqp_url}

    def generation(number: int) -> SimulatedFleet:
        spec = HostSpec(id=host_id, capacity=HOST, labels={"suite": "crash", "generation": str(number)})
        return SimulatedFleet([spec], credentials=url, heartbeat_interval=HEARTBEAT)

    first, restarted = generation(1), generation(2)
    async with Tap(servers.amqp_url, topology.DEAD_LETTER_EXCHANGE.name, topology.AGENT_HEARTBEAT) as refused:
        await first.start()
        try:
            await eventually(
                lambda: api.get(f"/v1/hosts/{host_id}"),
                lambda r: r.status_code == 200 and r.json()["labels"].get("generation") == "1",
                timeout=30,
                what="the first process's host online",
            )
            # The new process comes up while the old one still runs (or is still taken to): refused.
            await restarted.start()
            new_instance = restarted.agents[host_id].instance_id
            await refused.wait(lambda m: json.loads(m.body).get("instance_id") == new_instance)
            assert await _holder(servers, host_id) == first.agents[host_id].instance_id
            assert (await api.get(f"/v1/hosts/{host_id}")).json()["labels"]["generation"] == "1"
        finally:
            await first.cut_off(host_id)  # it crashes: no last heartbeat, nothing said
        try:
            await eventually(
                lambda: api.get(f"/v1/hosts/{host_id}"),
                lambda r: r.json()["labels"].get("generation") == "2" and r.json()["status"] == "online",
                timeout=OFFLINE_TIMEOUT + 30,
                what="the restarted process to take its host over",
            )
            assert await _holder(servers, host_id) == new_instance
        finally:
            await restarted.stop()
            await first.stop()


async def _holder(servers: Servers, host_id: str) -> str | None:
    connection = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        holder: str | None = await connection.fetchval("SELECT agent_instance FROM hosts WHERE id = $1", host_id)
        return holder
    finally:
        await connection.close()


async def test_a_rejected_create_is_retried_elsewhere_until_max_attempts(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    bigger = Resources(cpu=64, memory_mb=128 * 1024, disk_gb=2000)
    async with (
        # Every create on these is refused by the agent; the bigger host is least loaded, so tried first.
        fleet(servers, api, "rjx", 3, {"suite": "reject", "pool": "doomed"}, fail_rate=1.0),
        fleet(servers, api, "rjy", 1, {"suite": "reject", "pool": "mixed"}, fail_rate=1.0, capacity=bigger),
        fleet(servers, api, "rjz", 1, {"suite": "reject", "pool": "mixed"}),
    ):
        retried = await create(api, "reject-retried", {"suite": "reject", "pool": "mixed"})
        doomed = await create(api, "reject-doomed", {"suite": "reject", "pool": "doomed"})
        await eventually(
            lambda: _statuses(api, [retried, doomed]),
            lambda s: s <= {"running", "failed"} and len(s) == 2,
            timeout=60,
            what="both VMs settled",
        )
        body = await vm(api, retried)
        assert (body["status"], body["hypervisor_id"], body["attempt"]) == ("running", "rjz-0001", 2)
        assert [(a["host"], a["outcome"]) for a in body["attempts"]][:1] == [("rjy-0001", "failed")]

        body = await vm(api, doomed)
        assert body["status"] == "failed"
        # CloudStack's ExcludeList: each attempt went to a host not tried before, VMSCHED_MAX_ATTEMPTS of them.
        tried = [a["host"] for a in body["attempts"] if a["outcome"] == "failed"]
        assert sorted(tried) == ["rjx-0001", "rjx-0002", "rjx-0003"]
        assert "failed on every attempt (3)" in body["status_reason"]
        report = await check(servers.asyncpg_dsn, [retried, doomed])
    print(f"agent rejection: 2 VMs -> {report.by_status}, attempts {len(tried)}")
    assert report.problems == []


async def test_a_create_command_lost_on_the_way_is_sent_again(api: httpx.AsyncClient, servers: Servers) -> None:
    async with fleet(servers, api, "resend", 1, {"suite": "resend"}) as simulated:
        # As if the scheduler committed the VM and its vm.assigned was then dead-lettered: PostgreSQL
        # says scheduled on resend-0001, and no command ever left.
        vm_id = uuid.uuid4()
        conn = await asyncpg.connect(servers.asyncpg_dsn)
        try:
            await conn.execute(
                """INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb, scheduled_at, updated_at)
                   VALUES ($1, 'resend', 'scheduled', 'resend-0001', 1, 512, 5, now(), now() - interval '1 minute')""",
                vm_id,
            )
        finally:
            await conn.close()
        await eventually(
            lambda: vm(api, str(vm_id)), lambda body: body["status"] == "running", timeout=30, what="VM running"
        )
        creates = [c for c in simulated.received("resend-0001") if c.vm_id == vm_id]
        assert [c.action for c in creates] == [CommandAction.CREATE]


async def test_a_failed_delete_keeps_the_vm_deleting_and_is_sent_again(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    async with fleet(servers, api, "undel", 1, {"suite": "undelete"}) as simulated:
        vm_id = await create(api, "undelete", {"suite": "undelete"})
        await eventually(lambda: vm(api, vm_id), lambda b: b["status"] == "running", timeout=30, what="running")
        hypervisor = simulated.hypervisors["undel-0001"]
        real_delete = hypervisor.delete_vm

        async def refuse_once(command: AgentCommand) -> None:
            hypervisor.delete_vm = real_delete  # type: ignore[method-assign]
            raise RuntimeError("disk busy")

        hypervisor.delete_vm = refuse_once  # type: ignore[method-assign]
        assert (await api.delete(f"/v1/vms/{vm_id}")).status_code == 202
        body = await eventually(
            lambda: vm(api, vm_id),
            lambda b: "delete failed" in (b["status_reason"] or ""),
            timeout=30,
            what="the failed delete recorded",
        )
        assert body["status"] == "deleting"
        await eventually(lambda: vm(api, vm_id), lambda b: b["status"] == "deleted", timeout=30, what="deleted")
        deletes = [c for c in simulated.received("undel-0001") if c.action is CommandAction.DELETE]
        assert len(deletes) == 2
        host = (await api.get("/v1/hosts/undel-0001")).json()
        assert (host["vm_count"], host["allocated"]["cpu"]) == (0, 0)
