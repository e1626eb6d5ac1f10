"""Agents that cannot lie (docs/security.md, "Agent identity"), on the real servers: each host's
agent is its own broker user; the broker keeps it to its own queue and its own messages, and the
gateway (VMSCHED_AGENT_AUTH=required, the default) takes a host's word only from that user and
only from the one agent process that holds the host id."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aio_pika
import aiormq
import asyncpg
import httpx
import pytest
from aio_pika.abc import AbstractIncomingMessage
from faststream import FastStream
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from devtools.stack import BIN, Stack
from tests.fleets import enroll, enrolled_fleet
from tests.integration.amqp_tools import Tap, publish_raw
from tests.integration.waiting import eventually
from tests.servers import Servers, provide_servers
from vmsched_agent import Agent, FakeHypervisor, HostSpec, SimulatedFleet
from vmsched_amqp import topology
from vmsched_amqp.agent_identity import AgentCredentials, agent_username, vhost_of
from vmsched_contract.messages import AgentConflict, AgentHeartbeat, ReportedStatus, Resources, VmStatusReport
from vmsched_gateway.bootstrap import build_app as build_gateway
from vmsched_pg.engine import ensure_database
from vmsched_pg.schema_upgrade import upgrade_schema
from vmsched_runtime.settings import Settings

CAPACITY = Resources(cpu=8, memory_mb=16384, disk_gb=100)
OFFLINE_TIMEOUT = 15.0  # the session stack's (tests/integration/conftest.py)
JSON = "application/json"


def suite() -> str:
    return f"id-{uuid.uuid4().hex[:6]}"


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack.async_client(timeout=30) as client:
        yield client


@pytest.fixture
async def dead_letters(servers: Servers) -> AsyncIterator[Tap]:
    """Agents' messages the gateway dead-letters (they keep the routing key they came with)."""
    async with Tap(
        servers.amqp_url, topology.DEAD_LETTER_EXCHANGE.name, topology.AGENT_HEARTBEAT, topology.VM_STATUS
    ) as tap:
        yield tap


@contextlib.asynccontextmanager
async def online(api: httpx.AsyncClient, servers: Servers, *hosts: HostSpec) -> AsyncIterator[SimulatedFleet]:
    async with await enrolled_fleet(servers, list(hosts), heartbeat_interval=0.5) as fleet:
        for host in hosts:
            await eventually(
                lambda host=host: api.get(f"/v1/hosts/{host.id}"),  # type: ignore[misc]
                lambda r: r.status_code == 200 and r.json()["status"] == "online",
                timeout=30,
                what=f"{host.id} online",
            )
        yield fleet


async def publish_as(
    credentials: AgentCredentials,
    routing_key: str,
    body: bytes,
    *,
    user_id: str | None,
    message_id: str,
    exchange: str = topology.EXCHANGE.name,
) -> None:
    """Publish as ``credentials``' user (confirmed), ``user_id`` set as given (None: not set)."""
    connection = await aio_pika.connect(credentials.amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        target = await channel.get_exchange(exchange, ensure=False)
        message = aio_pika.Message(body, content_type=JSON, message_id=message_id, user_id=user_id)
        await target.publish(message, routing_key=routing_key)


async def ignore(message: AbstractIncomingMessage) -> None:
    """A consumer's callback for a test that only asks whether it may consume."""


def reason(message: AbstractIncomingMessage) -> str:
    return str((message.headers or {}).get(topology.DEAD_LETTER_REASON_HEADER, ""))


async def refused_count(stack: Stack, kind: str, why: str) -> float:
    url = stack.services["gateway"].metrics_url
    assert url is not None
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(url)).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vmsched_agent_messages_refused_total" and sample.labels == {"kind": kind, "reason": why}:
                return float(sample.value)
    raise KeyError(f"vmsched_agent_messages_refused_total{{kind={kind}, reason={why}}} not exported")


# -- the broker -------------------------------------------------------------------------------


async def test_an_agent_may_consume_its_own_queue_and_the_broker_refuses_it_another_hosts(
    servers: Servers, stack: Stack
) -> None:
    prefix = suite()
    mine, theirs = f"{prefix}-a", f"{prefix}-b"
    credentials = await enroll(servers, [mine, theirs])
    admin = await aio_pika.connect(servers.amqp_url)
    async with admin:
        channel = await admin.channel()
        for host_id in (mine, theirs):  # as the gateway declares them
            queue = await channel.declare_queue(topology.agent_queue_name(host_id), durable=True)
            await queue.bind(topology.AGENTS_EXCHANGE.name, routing_key=host_id)
        agent = await aio_pika.connect(credentials[mine].amqp_url)
        async with agent:
            own = await (await agent.channel()).declare_queue(topology.agent_queue_name(mine), passive=True)
            await own.cancel(await own.consume(ignore))
            other = await (await agent.channel()).declare_queue(topology.agent_queue_name(theirs), passive=True)
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match="ACCESS_REFUSED"):
                await other.consume(ignore)
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match="ACCESS_REFUSED"):
                await (await agent.channel()).declare_queue(f"{prefix}-own-queue")  # nor declare one
        for host_id in (mine, theirs):
            await channel.queue_delete(topology.agent_queue_name(host_id))


async def test_the_broker_refuses_a_forged_user_id_and_any_message_but_heartbeats_and_reports(
    servers: Servers, stack: Stack
) -> None:
    prefix = suite()
    credentials = await enroll(servers, [f"{prefix}-a", f"{prefix}-b"])
    mine, theirs = credentials[f"{prefix}-a"], credentials[f"{prefix}-b"]
    beat = AgentHeartbeat(agent_id=theirs.host_id, capacity=CAPACITY).model_dump_json().encode()
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed, match="user_id property set to"):
        await publish_as(mine, topology.AGENT_HEARTBEAT, beat, user_id=theirs.username, message_id="forged")
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match=re.escape(f"topic '{topology.VM_CREATE}'")):
        await publish_as(mine, topology.VM_CREATE, b"{}", user_id=mine.username, message_id="not-mine-to-send")
    command = re.escape(f"exchange '{topology.AGENTS_EXCHANGE.name}'")
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused, match=command):
        await publish_as(
            mine, theirs.host_id, b"{}", user_id=mine.username, message_id="no", exchange=topology.AGENTS_EXCHANGE.name
        )


async def test_enroll_agent_prints_working_credentials_and_enrolling_again_rotates_the_password(
    servers: Servers, stack: Stack
) -> None:
    host_id = f"{suite()}-cli"

    def enroll_agent() -> AgentCredentials:
        done = subprocess.run(
            [str(BIN / "vmsched-gateway"), "enroll-agent", host_id],
            env={**os.environ, **servers.env()},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        (line,) = done.stdout.splitlines()
        assert set(json.loads(line)) == {"host_id", "username", "password", "amqp_url"}
        return AgentCredentials.model_validate_json(line)

    first = await asyncio.to_thread(enroll_agent)
    assert first.host_id == host_id
    assert first.username == agent_username(host_id, vhost_of(servers.amqp_url))
    await (await aio_pika.connect(first.amqp_url)).close()
    second = await asyncio.to_thread(enroll_agent)
    assert (second.username, second.password != first.password) == (first.username, True)
    await (await aio_pika.connect(second.amqp_url)).close()
    # The old password is no more. The refused connection is closed here: left to the garbage
    # collector, aio-pika closes it from __del__, which may run under the next test and warn there.
    refused = aio_pika.Connection(URL(first.amqp_url))
    try:
        with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError):
            await refused.connect()
    finally:
        await refused.close()


# -- the gateway ------------------------------------------------------------------------------


async def test_a_heartbeat_for_another_host_is_refused_and_that_hosts_record_is_unchanged(
    api: httpx.AsyncClient, servers: Servers, stack: Stack, dead_letters: Tap
) -> None:
    prefix = suite()
    victim = HostSpec(id=f"{prefix}-b", capacity=CAPACITY, labels={"suite": prefix, "who": "b"})
    (intruder,) = (await enroll(servers, [f"{prefix}-a"])).values()
    refused_before = await refused_count(stack, "heartbeat", "wrong_user")
    async with online(api, servers, victim):
        before = (await api.get(f"/v1/hosts/{victim.id}")).json()
        lie = AgentHeartbeat(
            agent_id=victim.id,
            capacity=Resources(cpu=512, memory_mb=1 << 20, disk_gb=100_000),
            labels={"suite": prefix, "who": "a"},
            instance_id="intruder",
        )
        await publish_as(
            intruder,
            topology.AGENT_HEARTBEAT,
            lie.model_dump_json().encode(),
            user_id=intruder.username,
            message_id=prefix,
        )
        dead = await dead_letters.wait(lambda m: m.message_id == prefix)
        assert "wrong_user" in reason(dead)
        assert f"'{intruder.username}'" in reason(dead)
        assert dead.headers[topology.DEAD_LETTER_QUEUE_HEADER] == topology.GATEWAY_HEARTBEAT_QUEUE.name
        # Later heartbeats of the host itself are folded; the lie never was.
        after = await eventually(
            lambda: api.get(f"/v1/hosts/{victim.id}"),
            lambda r: r.json()["last_heartbeat"] > before["last_heartbeat"],
            timeout=30,
            what=f"a newer heartbeat of {victim.id}",
        )
        assert (after.json()["capacity"], after.json()["labels"]) == (before["capacity"], before["labels"])
        assert after.json()["labels"]["who"] == "b"
    assert await refused_count(stack, "heartbeat", "wrong_user") >= refused_before + 1


async def test_a_heartbeat_without_user_id_is_refused_and_says_how_to_enroll(
    servers: Servers, stack: Stack, dead_letters: Tap
) -> None:
    host_id = f"{suite()}-legacy"
    beat = AgentHeartbeat(agent_id=host_id, capacity=CAPACITY)
    marker = f"legacy-{uuid.uuid4()}"
    await publish_raw(
        servers.amqp_url,
        topology.EXCHANGE.name,
        topology.AGENT_HEARTBEAT,
        beat.model_dump_json().encode(),
        message_id=marker,
        content_type=JSON,
    )
    dead = await dead_letters.wait(lambda m: m.message_id == marker)
    assert "no_user" in reason(dead)
    assert f"vmsched-gateway enroll-agent {host_id}" in reason(dead)
    async with stack.async_client() as api:
        assert (await api.get(f"/v1/hosts/{host_id}")).status_code == 404  # never became a host


async def test_a_report_about_a_vm_never_placed_on_the_host_is_refused_and_the_vm_is_unchanged(
    api: httpx.AsyncClient, servers: Servers, stack: Stack, dead_letters: Tap
) -> None:
    prefix = suite()
    owner = HostSpec(id=f"{prefix}-b", capacity=CAPACITY, labels={"suite": prefix})
    (other,) = (await enroll(servers, [f"{prefix}-a"])).values()
    refused_before = await refused_count(stack, "status", "vm_not_placed_here")
    async with online(api, servers, owner):
        body = {"name": "mine", "cpu": 1, "memory_mb": 512, "disk_gb": 5, "labels": {"suite": prefix}}
        vm_id = (await api.post("/v1/vms", json=body)).json()["id"]
        await eventually(
            lambda: api.get(f"/v1/vms/{vm_id}"), lambda r: r.json()["status"] == "running", timeout=30, what="running"
        )
        for status, marker in ((ReportedStatus.FAILED, f"{prefix}-failed"), (ReportedStatus.DELETED, f"{prefix}-del")):
            report = VmStatusReport(vm_id=uuid.UUID(vm_id), agent_id=other.host_id, status=status, message="lies")
            await publish_as(
                other, topology.VM_STATUS, report.model_dump_json().encode(), user_id=other.username, message_id=marker
            )
            dead = await dead_letters.wait(lambda m, marker=marker: m.message_id == marker)  # type: ignore[misc]
            assert "vm_not_placed_here" in reason(dead)
            assert f"never placed on host {other.host_id}" in reason(dead)
        # Nor may it report as the host the VM is on: that is another broker user's word.
        forged = VmStatusReport(vm_id=uuid.UUID(vm_id), agent_id=owner.id, status=ReportedStatus.FAILED)
        await publish_as(
            other, topology.VM_STATUS, forged.model_dump_json().encode(), user_id=other.username, message_id=prefix
        )
        assert "wrong_user" in reason(await dead_letters.wait(lambda m: m.message_id == prefix))
        vm = (await api.get(f"/v1/vms/{vm_id}")).json()
        assert (vm["status"], vm["hypervisor_id"]) == ("running", owner.id)
    assert await refused_count(stack, "status", "vm_not_placed_here") >= refused_before + 2


async def test_a_second_agent_process_for_an_online_host_is_refused_with_agent_conflict(
    api: httpx.AsyncClient, servers: Servers, stack: Stack, dead_letters: Tap
) -> None:
    prefix = suite()
    host = HostSpec(id=f"{prefix}-d", capacity=CAPACITY, labels={"suite": prefix, "copy": "first"})
    credentials = await enroll(servers, [host.id])
    refused_before = await refused_count(stack, "heartbeat", "instance_conflict")
    fleet = SimulatedFleet([host], credentials={host.id: credentials[host.id].amqp_url}, heartbeat_interval=0.5)
    async with Tap(servers.amqp_url, topology.EXCHANGE.name, topology.AGENT_CONFLICT) as conflicts, fleet:
        await eventually(
            lambda: api.get(f"/v1/hosts/{host.id}"),
            lambda r: r.status_code == 200 and r.json()["status"] == "online",
            timeout=30,
            what=f"{host.id} online",
        )
        first = fleet.agents[host.id]
        # The same host id started again elsewhere (a copied configuration), bigger and labelled otherwise.
        second = Agent(
            host.id,
            Resources(cpu=64, memory_mb=262144, disk_gb=4000),
            FakeHypervisor(host),
            amqp_url=credentials[host.id].amqp_url,
            labels={"suite": prefix, "copy": "second"},
            heartbeat_interval=0.5,
        )
        assert second.instance_id != first.instance_id

        def from_second(message: AbstractIncomingMessage) -> bool:
            return bool(json.loads(message.body).get("instance_id") == second.instance_id)

        async with second:
            event = await conflicts.wait(lambda m: json.loads(m.body)["host_id"] == host.id)
            conflict = AgentConflict.model_validate_json(event.body)
            assert (conflict.instance_id, conflict.held_by) == (second.instance_id, first.instance_id)
            assert "instance_conflict" in reason(await dead_letters.wait(from_second))
            # Three of its heartbeats refused, while the first one's go on: the host is as the first says.
            await eventually(
                lambda: asyncio.sleep(0, [m for m in dead_letters.messages if from_second(m)]),
                lambda refused: len(refused) >= 3,
                timeout=30,
                what="three of the second process's heartbeats refused",
            )
            seen = (await api.get(f"/v1/hosts/{host.id}")).json()
            assert (seen["status"], seen["labels"]["copy"], seen["capacity"]["cpu"]) == (
                "online",
                "first",
                CAPACITY.cpu,
            )
        # Its goodbye frees nothing: the first one still holds the host.
        assert "instance_conflict" in reason(
            await dead_letters.wait(lambda m: from_second(m) and json.loads(m.body)["leaving"])
        )
        assert await _holder(servers, host.id) == first.instance_id
        assert (await api.get(f"/v1/hosts/{host.id}")).json()["labels"]["copy"] == "first"
    assert await refused_count(stack, "heartbeat", "instance_conflict") >= refused_before + 4


async def test_an_agent_that_stops_hands_its_host_to_its_next_process_at_once(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    prefix = suite()
    before = HostSpec(id=f"{prefix}-r", capacity=CAPACITY, labels={"suite": prefix, "generation": "1"})
    async with online(api, servers, before) as fleet:
        old_instance = fleet.agents[before.id].instance_id
    stopped = time.monotonic()
    await eventually(  # its last heartbeat (leaving) gives the host id up
        lambda: _holder(servers, before.id), lambda holder: holder is None, timeout=10, what="the goodbye folded"
    )
    after = HostSpec(id=before.id, capacity=CAPACITY, labels={"suite": prefix, "generation": "2"})
    async with await enrolled_fleet(servers, [after], heartbeat_interval=0.5) as restarted:
        await eventually(
            lambda: api.get(f"/v1/hosts/{after.id}"),
            lambda r: r.json()["labels"].get("generation") == "2" and r.json()["status"] == "online",
            timeout=OFFLINE_TIMEOUT,  # sooner than a crashed agent's successor would be let in
            what="the restarted agent's heartbeat",
        )
        assert time.monotonic() - stopped < OFFLINE_TIMEOUT
        assert await _holder(servers, after.id) == restarted.agents[after.id].instance_id != old_instance


async def _holder(servers: Servers, host_id: str) -> str | None:
    connection = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        holder: str | None = await connection.fetchval("SELECT agent_instance FROM hosts WHERE id = $1", host_id)
        return holder
    finally:
        await connection.close()


# -- VMSCHED_AGENT_AUTH=off -------------------------------------------------------------------


@pytest.fixture(scope="module")
def trusted_servers() -> Iterator[Servers]:
    """Servers of its own, for a gateway that takes anyone's word."""
    with provide_servers() as servers:
        yield servers


@contextlib.asynccontextmanager
async def consuming(app: FastStream) -> AsyncIterator[None]:
    async with app.lifespan_context():
        await app.start()
        try:
            yield
        finally:
            await app.stop()


async def test_with_agent_auth_off_the_gateway_takes_a_legacy_heartbeat_from_any_user(trusted_servers: Servers) -> None:
    await ensure_database(trusted_servers.database_url)
    await upgrade_schema(trusted_servers.database_url)
    settings = Settings.from_environment(trusted_servers.env(VMSCHED_AGENT_AUTH="off", VMSCHED_METRICS_PORT="0"))
    host_id = f"{suite()}-lab"
    # An agent of before: the services' user, no user_id, no instance id.
    legacy: dict[str, Any] = json.loads(AgentHeartbeat(agent_id=host_id, capacity=CAPACITY).model_dump_json())
    del legacy["instance_id"], legacy["leaving"]
    async with consuming(build_gateway(settings)):
        await publish_raw(
            trusted_servers.amqp_url,
            topology.EXCHANGE.name,
            topology.AGENT_HEARTBEAT,
            json.dumps(legacy).encode(),
            message_id="legacy",
            content_type=JSON,
        )
        connection = await asyncpg.connect(trusted_servers.asyncpg_dsn)
        try:
            row = await eventually(
                lambda: connection.fetchrow("SELECT status, cpu, agent_instance FROM hosts WHERE id = $1", host_id),
                lambda found: found is not None,
                timeout=30,
                what="the legacy host's row",
            )
        finally:
            await connection.close()
    assert row is not None
    assert (row["status"], row["cpu"], row["agent_instance"]) == ("online", CAPACITY.cpu, None)
