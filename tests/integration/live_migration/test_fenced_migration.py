"""A migration one of whose hosts is fenced (docs/operations.md#fencing), on the real servers: called
off at once, not at VMSCHED_MIGRATION_TIMEOUT (the stack's is the default ten minutes). The fenced
host is cut off first, so that the migration waits on it: its step's command stays in its queue."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tests.integration.amqp_tools import Tap
from tests.integration.moving import MigrationFleet, claims_of, disagreements, host_shares, open_only, running
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology
from vmsched_contract.messages import CommandAction

FLEET = MigrationFleet(suite="mfence", hosts=3)
SUITE = FLEET.suite
HOSTS = FLEET.host_ids
SOURCE, TARGET, SPARE = HOSTS  # the spare's agent cannot migrate: it only takes restarted VMs
VM = {"cpu": 2, "memory_mb": 2048, "disk_gb": 20, "labels": {"suite": SUITE}, "restart_policy": "on_failure"}
SHARE = (2, 2048, 20, 0, 1)
NOTHING = (0, 0, 0, 0, 0)
# Well under VMSCHED_MIGRATION_TIMEOUT: only the fence can have ended the migration this soon.
AT_ONCE = 10.0


async def vm_of(api: httpx.AsyncClient, vm_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/vms/{vm_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@asynccontextmanager
async def fenced_while_cut_off(api: httpx.AsyncClient, fleet: SimulatedFleet, host_id: str) -> AsyncIterator[None]:
    """``host_id`` cut off now, fenced when the body says so; afterwards back, unfenced."""
    await fleet.cut_off(host_id)
    try:
        yield
    finally:
        await fleet.reconnect(host_id)
        await api.delete(f"/v1/hosts/{host_id}/fence")  # 409 if the test failed before fencing it
        await eventually(
            lambda: api.get(f"/v1/hosts/{host_id}"),
            lambda r: r.json()["status"] == "online",
            timeout=30,
            what=f"{host_id} online again",
        )


async def fence(api: httpx.AsyncClient, host_id: str) -> None:
    response = await api.post(f"/v1/hosts/{host_id}/fence")
    assert response.status_code == 200, response.text


async def migrating_at(api: httpx.AsyncClient, vm_id: str, task: str) -> dict[str, Any]:
    response = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: (r.json()["status"], r.json()["task"]) == ("migrating", task),
        timeout=30,
        what=f"the migration at {task}",
    )
    body: dict[str, Any] = response.json()
    assert (body["hypervisor_id"], body["migration_target"]) == (SOURCE, TARGET)
    return body


def migration_failed(vm_id: str, reason: str) -> Any:
    return lambda m: json.loads(m.body)["vm_id"] == vm_id and json.loads(m.body)["reason"] == reason


async def shares(servers: Servers) -> dict[str, tuple[int, ...]]:
    found = await eventually(
        lambda: host_shares(servers, HOSTS),
        lambda found: not disagreements(found),
        timeout=30,
        what="PostgreSQL's and Redis's allocations to agree",
    )
    return {s.host_id: s.recorded for s in found}


async def test_a_fenced_target_rolls_the_migration_back_at_once_and_the_vm_keeps_running_on_its_source(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    await open_only(api, HOSTS, SOURCE)
    vm = await running(api, {"name": f"{SUITE}-target-{uuid.uuid4().hex[:6]}", **VM})
    assert vm["hypervisor_id"] == SOURCE
    async with (
        Tap(servers.amqp_url, topology.EXCHANGE.name, topology.VM_MIGRATION_FAILED) as failures,
        fenced_while_cut_off(api, fleet, TARGET),
    ):
        await open_only(api, HOSTS, SOURCE, TARGET)
        response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": TARGET})
        assert response.status_code == 202, response.text
        await migrating_at(api, vm["id"], "preparing")  # the prepare waits in the target's queue

        await fence(api, TARGET)
        back = (
            await eventually(
                lambda: api.get(f"/v1/vms/{vm['id']}"),
                lambda r: r.json()["status"] != "migrating",
                timeout=AT_ONCE,
                what="the migration called off",
            )
        ).json()
        assert (back["status"], back["hypervisor_id"], back["task"], back["migration_target"]) == (
            "running",
            SOURCE,
            None,
            None,
        )
        assert f"its target {TARGET} was fenced" in back["status_reason"]
        event = await failures.wait(migration_failed(vm["id"], "target_fenced"), timeout=AT_ONCE)
        assert json.loads(event.body)["to"] == TARGET
        held = await shares(servers)
        assert (held[SOURCE], held[TARGET]) == (SHARE, NOTHING)
        assert await claims_of(servers, vm["id"]) == {"claim": SOURCE, "target": None}
    # Back (and unfenced), the target carries out what waited in its queue, the abort last: it holds
    # nothing of the VM.
    await eventually(
        lambda: _now([c.action for c in fleet.received(TARGET) if str(c.vm_id) == vm["id"]]),
        lambda actions: actions == [CommandAction.PREPARE_MIGRATION, CommandAction.ABORT_MIGRATION],
        timeout=30,
        what="the target told to abort",
    )
    assert uuid.UUID(vm["id"]) not in fleet.hypervisors[TARGET].vms
    assert (await vm_of(api, vm["id"]))["status"] == "running"


async def test_a_fenced_source_fails_the_migrating_vm_at_once_which_restarts_elsewhere_and_the_target_aborts(
    api: httpx.AsyncClient, fleet: SimulatedFleet, servers: Servers
) -> None:
    await open_only(api, HOSTS, SOURCE)
    vm = await running(api, {"name": f"{SUITE}-source-{uuid.uuid4().hex[:6]}", **VM})
    assert vm["hypervisor_id"] == SOURCE
    async with (
        Tap(servers.amqp_url, topology.EXCHANGE.name, topology.VM_MIGRATION_FAILED) as failures,
        fenced_while_cut_off(api, fleet, SOURCE),
    ):
        await open_only(api, HOSTS, SOURCE, TARGET)
        response = await api.post(f"/v1/vms/{vm['id']}/migrate", json={"target_host": TARGET})
        assert response.status_code == 202, response.text
        # The target prepared; the hand-over waits in the (cut off) source's queue.
        await migrating_at(api, vm["id"], "handing_over")
        await open_only(api, HOSTS, SPARE)  # where its restart goes

        await fence(api, SOURCE)
        failed = (
            await eventually(
                lambda: api.get(f"/v1/vms/{vm['id']}"),
                lambda r: r.json()["status"] != "migrating",
                timeout=AT_ONCE,
                what="the migration called off",
            )
        ).json()
        assert failed["status"] == "failed", failed  # then restarted after VMSCHED_RESTART_DELAY (4 s)
        assert (failed["task"], failed["migration_target"]) == (None, None)
        assert [a["host"] for a in failed["attempts"] if a["outcome"] == "host fenced"] == [SOURCE]
        await failures.wait(migration_failed(vm["id"], "source_fenced"), timeout=AT_ONCE)
        # The target was told to abort what it prepared, and does (it is not cut off).
        await eventually(
            lambda: _now([c.action for c in fleet.received(TARGET) if str(c.vm_id) == vm["id"]]),
            lambda actions: actions == [CommandAction.PREPARE_MIGRATION, CommandAction.ABORT_MIGRATION],
            timeout=AT_ONCE,
            what="the target told to abort",
        )
        assert uuid.UUID(vm["id"]) not in fleet.hypervisors[TARGET].vms

        restarted = (
            await eventually(
                lambda: api.get(f"/v1/vms/{vm['id']}"),
                lambda r: r.json()["status"] == "running",
                timeout=30,
                what="the VM restarted elsewhere",
            )
        ).json()
        assert (restarted["hypervisor_id"], restarted["restart_count"]) == (SPARE, 1)
        held = await shares(servers)
        assert (held[SOURCE], held[TARGET], held[SPARE]) == (NOTHING, NOTHING, SHARE)
        assert await claims_of(servers, vm["id"]) == {"claim": SPARE, "target": None}


async def _now(value: list[CommandAction]) -> list[CommandAction]:
    return value
