"""Fencing on the real servers (docs/operations.md#fencing). With VMSCHED_FENCE_COMMAND set, a host
silent past the lost timeout is fenced by the command before any of its VMs restarts elsewhere; a
fence that fails keeps them ``unknown`` (and says so: ``host.fence_failed``) and is run again after a
backoff until it succeeds or an operator fences the host; a fenced host whose agent comes back
deletes every copy it still runs and takes no VM until it is unfenced."""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aio_pika.abc import AbstractIncomingMessage

from devtools.stack import Stack
from tests.faults.conftest import fault_stack, wait_settled
from tests.faults.invariants import check
from tests.fleets import enrolled_fleet
from tests.integration.amqp_tools import Tap
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology
from vmsched_contract.messages import CommandAction, Resources

pytestmark = pytest.mark.slow

OFFLINE_TIMEOUT = 2.0
LOST_TIMEOUT = 6.0
HEARTBEAT = 0.5
HOST = Resources(cpu=32, memory_mb=64 * 1024, disk_gb=1000)
RETRY_DELAY = 2.0  # VMSCHED_FENCE_RETRY_DELAY: a failed fence runs again 2 s later, then 4 s apart
RETRY_MAX_DELAY = 4.0

# The fence command: records each call (the time, the host id, its labels) and fails for hosts
# labelled fence=fails, as an IPMI power-off that cannot reach its BMC, and the first time for hosts
# labelled fence=fails-once, as a BMC that was rebooting.
FENCE_SCRIPT = """
import json, sys, time
host_id, labels = sys.argv[1], json.loads(sys.argv[2])
with open(sys.argv[0] + ".calls", "a") as calls:
    calls.write(json.dumps({"at": time.time(), "host": host_id, "labels": labels}) + "\\n")
with open(sys.argv[0] + ".calls") as calls:
    tries = sum(1 for line in calls if json.loads(line)["host"] == host_id)
if labels.get("fence") == "fails" or (labels.get("fence") == "fails-once" and tries == 1):
    print("BMC unreachable")
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def fence_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("fence") / "fence.py"
    script.write_text(FENCE_SCRIPT)
    return script


@pytest.fixture(scope="module")
def fencing_stack(servers: Servers, fence_script: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(
        servers,
        Path(tmp_path_factory.mktemp("fencing-logs")),
        schedulers=1,
        VMSCHED_AGENT_OFFLINE_TIMEOUT=str(OFFLINE_TIMEOUT),
        VMSCHED_AGENT_LOST_TIMEOUT=str(LOST_TIMEOUT),
        VMSCHED_RESTART_DELAY="1",
        VMSCHED_RESEND_STALE_AFTER="3",
        VMSCHED_FENCE_COMMAND=f"{sys.executable} {fence_script}",
        VMSCHED_FENCE_TIMEOUT="10",
        VMSCHED_FENCE_RETRY_DELAY=str(RETRY_DELAY),
        VMSCHED_FENCE_RETRY_MAX_DELAY=str(RETRY_MAX_DELAY),
    ) as stack:
        yield stack


@pytest.fixture
async def api(fencing_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with fencing_stack.async_client(timeout=30) as client:
        yield client


def fence_calls(script: Path) -> list[dict[str, Any]]:
    calls = Path(f"{script}.calls")
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


@contextlib.asynccontextmanager
async def fleet(
    servers: Servers, api: httpx.AsyncClient, prefix: str, labels: dict[str, str]
) -> AsyncIterator[SimulatedFleet]:
    hosts = generate_hosts(1, prefix=prefix, capacity=HOST, labels=labels)
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=HEARTBEAT) as simulated:
        await eventually(
            lambda: api.get(f"/v1/hosts/{hosts[0].id}"),
            lambda r: r.status_code == 200 and r.json()["status"] == "online",
            timeout=30,
            what=f"{hosts[0].id} online",
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


async def statuses(api: httpx.AsyncClient, vm_ids: list[str]) -> set[str]:
    return {(await vm(api, vm_id))["status"] for vm_id in vm_ids}


async def hosts_of(api: httpx.AsyncClient, vm_ids: list[str]) -> set[str | None]:
    return {(await vm(api, vm_id))["hypervisor_id"] for vm_id in vm_ids}


async def vms_on(
    api: httpx.AsyncClient, survivor_id: str, doomed_id: str, labels: dict[str, str], count: int
) -> list[str]:
    """``count`` on_failure VMs, all on ``doomed_id`` (the survivor paused meanwhile), running."""
    assert (await api.patch(f"/v1/hosts/{survivor_id}", json={"scheduling_paused": True})).status_code == 200
    ids = [await create(api, f"{doomed_id}-{i}", labels, restart_policy="on_failure") for i in range(count)]
    await eventually(lambda: statuses(api, ids), lambda s: s == {"running"}, timeout=30, what="every VM running")
    assert await hosts_of(api, ids) == {doomed_id}
    assert (await api.patch(f"/v1/hosts/{survivor_id}", json={"scheduling_paused": False})).status_code == 200
    return ids


async def test_a_lost_hosts_vms_restart_elsewhere_only_after_the_fence_command_fenced_it(
    api: httpx.AsyncClient, servers: Servers, fence_script: Path
) -> None:
    labels = {"suite": "fenceok"}
    async with (
        fleet(servers, api, "fok-live", labels) as _survivor,
        fleet(servers, api, "fok-lost", {**labels, "rack": "r7"}) as lost,
        Tap(servers.amqp_url, topology.EXCHANGE.name, topology.HOST_FENCED) as fenced_events,
    ):
        ids = await vms_on(api, "fok-live-0001", "fok-lost-0001", labels, 3)
        await lost.cut_off("fok-lost-0001")
        await eventually(
            lambda: statuses(api, ids),
            lambda s: s == {"running"},
            timeout=LOST_TIMEOUT + 40,
            what="every VM running again",
            interval=0.2,
        )
        await eventually(lambda: hosts_of(api, ids), lambda h: h == {"fok-live-0001"}, timeout=30, what="moved")
        calls = [call for call in fence_calls(fence_script) if call["host"] == "fok-lost-0001"]
        assert len(calls) == 1  # once, with the host's labels
        assert calls[0]["labels"]["rack"] == "r7"
        for vm_id in ids:
            body = await vm(api, vm_id)
            assert body["restart_count"] == 1
            fenced = [a for a in body["attempts"] if a["outcome"] == "host fenced"]
            assert [a["host"] for a in fenced] == ["fok-lost-0001"]
            # Failed (and so restarted) only after the command had fenced the host.
            assert datetime.fromisoformat(fenced[0]["at"]).timestamp() >= calls[0]["at"]
            assert not any(a["outcome"] == "agent lost connection" for a in body["attempts"])
        event = await fenced_events.wait(lambda m: json.loads(m.body)["host_id"] == "fok-lost-0001")
        assert json.loads(event.body)["by"] == "command"
        host = (await api.get("/v1/hosts/fok-lost-0001")).json()
        assert (host["status"], host["fenced_by"], host["vm_count"]) == ("fenced", "command", 0)
        await wait_settled(servers, ids, timeout=30)
        report = await check(servers.asyncpg_dsn, ids)
    assert report.problems == []


def fence_failed(host_id: str, attempt: int) -> Callable[[AbstractIncomingMessage], bool]:
    def matches(message: AbstractIncomingMessage) -> bool:
        body = json.loads(message.body)
        return bool(
            message.routing_key == topology.HOST_FENCE_FAILED
            and body["host_id"] == host_id
            and body["attempt"] == attempt
        )

    return matches


async def test_a_failed_fence_keeps_the_vms_unknown_while_it_is_tried_again_until_an_operator_fences_the_host(
    api: httpx.AsyncClient, servers: Servers, fence_script: Path
) -> None:
    labels = {"suite": "fencefail"}
    async with (
        fleet(servers, api, "ffl-live", labels) as survivor,
        fleet(servers, api, "ffl-lost", {**labels, "fence": "fails"}) as lost,
        Tap(servers.amqp_url, topology.EXCHANGE.name, topology.HOST_FENCE_FAILED, topology.HOST_FENCED) as tap,
    ):
        ids = await vms_on(api, "ffl-live-0001", "ffl-lost-0001", labels, 3)
        await lost.cut_off("ffl-lost-0001")
        failure = await tap.wait(fence_failed("ffl-lost-0001", 1), timeout=LOST_TIMEOUT + 30)
        assert json.loads(failure.body)["exit_code"] == 3
        assert "BMC unreachable" in json.loads(failure.body)["detail"]
        # Tried again after the backoff, and failing again: nothing failed, nothing restarted.
        again = await tap.wait(fence_failed("ffl-lost-0001", 2), timeout=RETRY_DELAY + 10)
        tried_at = [datetime.fromisoformat(json.loads(m.body)["at"]) for m in (failure, again)]
        assert (tried_at[1] - tried_at[0]).total_seconds() >= RETRY_DELAY
        next_try = json.loads(again.body)["next_try_at"]
        assert (datetime.fromisoformat(next_try) - tried_at[1]).total_seconds() >= RETRY_MAX_DELAY - 1  # 2 s, 4 s
        assert (await api.get("/v1/hosts/ffl-lost-0001")).json()["status"] == "offline"
        assert await statuses(api, ids) == {"unknown"}
        assert not [c for c in survivor.received("ffl-live-0001") if c.action is CommandAction.CREATE]

        # The operator knows better: the host is down. Its VMs restart elsewhere at once.
        tried_before_the_fence = len([c for c in fence_calls(fence_script) if c["host"] == "ffl-lost-0001"])
        answer = await api.post("/v1/hosts/ffl-lost-0001/fence")
        assert answer.status_code == 200, answer.text
        assert (answer.json()["status"], answer.json()["fenced_by"]) == ("fenced", "operator")
        await eventually(
            lambda: hosts_of(api, ids), lambda h: h == {"ffl-live-0001"}, timeout=30, what="restarted elsewhere"
        )
        await eventually(lambda: statuses(api, ids), lambda s: s == {"running"}, timeout=30, what="running again")
        await tap.wait(lambda m: m.routing_key == topology.HOST_FENCED and json.loads(m.body)["by"] == "operator")

        # Back it comes, still running the three: it is told to delete every one and stays fenced.
        await lost.reconnect("ffl-lost-0001")
        await eventually(
            lambda: _async({str(v) for v in lost.agents["ffl-lost-0001"].vm_ids}),
            lambda running: running == set(),
            timeout=30,
            what="the copies deleted on the fenced host",
        )
        deleted = {str(c.vm_id) for c in lost.received("ffl-lost-0001") if c.action is CommandAction.DELETE}
        assert deleted == set(ids)
        host = (await api.get("/v1/hosts/ffl-lost-0001")).json()
        assert host["status"] == "fenced"  # heard from, and still fenced
        # A fenced host takes no VM, even when it is the only one with room.
        assert (await api.patch("/v1/hosts/ffl-live-0001", json={"scheduling_paused": True})).status_code == 200
        waiting = await create(api, "ffl-refused", labels)
        await eventually(
            lambda: statuses(api, [waiting]), lambda s: s == {"unschedulable"}, timeout=30, what="unschedulable"
        )
        # Unfenced, it takes VMs again.
        answer = await api.delete("/v1/hosts/ffl-lost-0001/fence")
        assert answer.status_code == 200, answer.text
        assert (answer.json()["status"], answer.json()["fenced_at"]) == ("online", None)
        assert (await api.delete("/v1/hosts/ffl-lost-0001/fence")).status_code == 409
        placed = await create(api, "ffl-placed", labels)
        await eventually(lambda: statuses(api, [placed]), lambda s: s == {"running"}, timeout=30, what="placed")
        assert (await vm(api, placed))["hypervisor_id"] == "ffl-lost-0001"
        assert (await api.patch("/v1/hosts/ffl-live-0001", json={"scheduling_paused": False})).status_code == 200
        # Fenced, the command was not run again (one try may have been on its way as the fence came).
        tried = len([c for c in fence_calls(fence_script) if c["host"] == "ffl-lost-0001"])
        assert tried_before_the_fence <= tried <= tried_before_the_fence + 1
        everyone = [*ids, placed]
        await wait_settled(servers, everyone, timeout=30)
        report = await check(servers.asyncpg_dsn, everyone)
    assert report.problems == []


async def test_a_fence_command_that_failed_once_is_run_again_and_the_vms_restart_only_after_it_fenced_the_host(
    api: httpx.AsyncClient, servers: Servers, fence_script: Path
) -> None:
    labels = {"suite": "fenceretry"}
    async with (
        fleet(servers, api, "frt-live", labels) as _survivor,
        fleet(servers, api, "frt-lost", {**labels, "fence": "fails-once"}) as lost,
        Tap(servers.amqp_url, topology.EXCHANGE.name, topology.HOST_FENCE_FAILED, topology.HOST_FENCED) as tap,
    ):
        ids = await vms_on(api, "frt-live-0001", "frt-lost-0001", labels, 3)
        await lost.cut_off("frt-lost-0001")
        failure = await tap.wait(fence_failed("frt-lost-0001", 1), timeout=LOST_TIMEOUT + 30)
        assert json.loads(failure.body)["exit_code"] == 3
        assert await statuses(api, ids) == {"unknown"}  # the second try is RETRY_DELAY away
        fenced = await tap.wait(
            lambda m: m.routing_key == topology.HOST_FENCED and json.loads(m.body)["host_id"] == "frt-lost-0001",
            timeout=RETRY_DELAY + 20,
        )
        assert json.loads(fenced.body)["by"] == "command"
        await eventually(
            lambda: statuses(api, ids), lambda s: s == {"running"}, timeout=30, what="every VM running again"
        )
        assert await hosts_of(api, ids) == {"frt-live-0001"}
        calls = [call for call in fence_calls(fence_script) if call["host"] == "frt-lost-0001"]
        assert len(calls) == 2
        assert calls[1]["at"] - calls[0]["at"] >= RETRY_DELAY
        for vm_id in ids:
            body = await vm(api, vm_id)
            assert body["restart_count"] == 1
            fenced_attempts = [a for a in body["attempts"] if a["outcome"] == "host fenced"]
            assert [a["host"] for a in fenced_attempts] == ["frt-lost-0001"]
            # Failed (and so restarted) only after the second try had fenced the host.
            assert datetime.fromisoformat(fenced_attempts[0]["at"]).timestamp() >= calls[1]["at"]
        host = (await api.get("/v1/hosts/frt-lost-0001")).json()
        assert (host["status"], host["fenced_by"]) == ("fenced", "command")
        await wait_settled(servers, ids, timeout=30)
        report = await check(servers.asyncpg_dsn, ids)
    assert report.problems == []


async def test_fencing_needs_hosts_admin_and_a_known_host(api: httpx.AsyncClient, fencing_stack: Stack) -> None:
    assert (await api.post(f"/v1/hosts/nowhere-{uuid.uuid4().hex[:6]}/fence")).status_code == 404
    assert (await api.delete(f"/v1/hosts/nowhere-{uuid.uuid4().hex[:6]}/fence")).status_code == 404
    token = await api.post("/v1/tokens", json={"name": "fence-reader", "project": "default", "scopes": ["hosts:read"]})
    assert token.status_code == 201, token.text
    headers = {"Authorization": f"Bearer {token.json()['token']}"}
    assert (await api.post("/v1/hosts/anything/fence", headers=headers)).status_code == 403
    assert (await api.delete("/v1/hosts/anything/fence", headers=headers)).status_code == 403


async def _async(value: set[str]) -> set[str]:
    return value
