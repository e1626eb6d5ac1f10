"""Every service's /metrics after a real run: placements, latencies, conflicts, the fleet's hosts and
resources, dead letters. The session stack is shared, so counts are lower bounds."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.amqp_tools import publish_raw
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import generate_hosts
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp import topology
from vmsched_contract.messages import Resources

SUITE = "metrics"
HOSTS = 3
VMS = 6
VM = {"cpu": 2, "memory_mb": 1024, "disk_gb": 10, "labels": {"suite": SUITE}}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels``; KeyError naming what exists when it does not."""
    key = (name, frozenset(labels.items()))
    if key not in samples:
        present = sorted(str(dict(lab)) for n, lab in samples if n == name)
        raise KeyError(f"{name}{labels} not exported; {name} has {present or 'no series'}")
    return samples[key]


async def scrape(client: httpx.AsyncClient, url: str) -> Samples:
    response = await client.get(url)
    assert response.status_code == 200, response.text
    return parse(response.text)


@pytest.fixture(scope="module")
async def fleet(stack: Stack, servers: Servers) -> AsyncIterator[SimulatedFleet]:
    hosts = generate_hosts(
        HOSTS,
        prefix=f"metrics-{uuid.uuid4().hex[:6]}",
        capacity=Resources(cpu=16, memory_mb=32768, disk_gb=200),
        labels={"suite": SUITE},
    )
    async with await enrolled_fleet(servers, hosts, heartbeat_interval=1.0) as running:
        async with stack.async_client() as api:
            ids = {host.id for host in hosts}
            await eventually(
                lambda: api.get("/v1/hosts"),
                lambda r: sum(1 for h in r.json() if h["id"] in ids and h["status"] == "online") == HOSTS,
                timeout=60,
                what=f"{HOSTS} hosts online",
            )
        yield running


@dataclass
class Placed:
    vm_ids: list[str]
    placed_before: float  # the scheduler's count of least_loaded placements before these


@pytest.fixture(scope="module")
async def placed(stack: Stack, fleet: SimulatedFleet) -> Placed:
    scheduler = stack.services["scheduler-1"].metrics_url
    assert scheduler is not None
    async with stack.async_client(timeout=30) as api:
        before = await scrape(api, scheduler)
        created = await asyncio.gather(
            *(api.post("/v1/vms", json={**VM, "name": f"metrics-{i}", "strategy": "least_loaded"}) for i in range(VMS))
        )
        ids = [response.json()["id"] for response in created]
        await eventually(
            lambda: asyncio.gather(*(api.get(f"/v1/vms/{vm_id}") for vm_id in ids)),
            lambda found: all(r.json()["status"] == "running" for r in found),
            timeout=60,
            what=f"{VMS} VMs running",
        )
    return Placed(ids, value(before, "vmsched_placements_total", strategy="least_loaded", outcome="scheduled"))


async def test_every_service_exports_the_placement_fleet_and_dead_letter_metrics(
    stack: Stack, servers: Servers, fleet: SimulatedFleet, placed: Placed
) -> None:
    scheduler = stack.services["scheduler-1"].metrics_url
    gateway = stack.services["gateway"].metrics_url
    assert scheduler is not None
    assert gateway is not None
    async with stack.async_client(timeout=30) as api:
        paused = next(iter(fleet.agents))
        assert (await api.patch(f"/v1/hosts/{paused}", json={"scheduling_paused": True})).status_code == 200
        try:
            # A status report nobody can read: the gateway dead-letters it and counts it.
            await publish_raw(
                servers.amqp_url,
                topology.EXCHANGE.name,
                topology.VM_STATUS,
                b"{not json",
                message_id=f"poison-{uuid.uuid4()}",
                content_type="application/json",
            )
            dead = await eventually(
                lambda: scrape(api, gateway),
                # Absent until the gateway has dead-lettered something on that queue.
                lambda s: (
                    s.get(
                        (
                            "vmsched_dead_lettered_messages_total",
                            frozenset({("queue", topology.GATEWAY_STATUS_QUEUE.name)}),
                        ),
                        0,
                    )
                    >= 1
                ),
                timeout=30,
                what="the gateway to count the dead letter",
            )
            fleet_metrics = await scrape(api, f"{stack.api_url}/metrics")
        finally:
            await api.patch(f"/v1/hosts/{paused}", json={"scheduling_paused": False})
        after = await scrape(api, scheduler)

    # Scheduler: placements by strategy and outcome, decision latency, request -> assignment, conflicts.
    placed_now = value(after, "vmsched_placements_total", strategy="least_loaded", outcome="scheduled")
    assert placed_now >= placed.placed_before + VMS
    assert value(after, "vmsched_decision_seconds_count") >= VMS
    assert 0 < value(after, "vmsched_decision_seconds_sum") < VMS * 1.0
    assert value(after, "vmsched_request_to_assignment_seconds_count") >= VMS
    assert value(after, "vmsched_request_to_assignment_seconds_bucket", le="+Inf") >= VMS
    assert value(after, "vmsched_round_vms_total", outcome="assigned") >= VMS
    # Series that exist from the start (a dashboard's rate() needs a first sample), whatever happened.
    for stage in ("redis", "postgres"):
        assert ("vmsched_claim_conflicts_total", frozenset({("stage", stage)})) in after
    assert ("vmsched_placements_total", frozenset({("strategy", "best_fit"), ("outcome", "unschedulable")})) in after

    # Gateway: the dead letter above, and its own series only.
    assert value(dead, "vmsched_dead_lettered_messages_total", queue=topology.GATEWAY_STATUS_QUEUE.name) >= 1
    assert not any(name.startswith("vmsched_placements") for name, _ in dead)

    # Each process shows its own figures: the API's has no scheduler counters stuck at zero.
    for name in ("vmsched_placements_total", "vmsched_decision_seconds_count", "vmsched_orphan_vms_total"):
        assert not any(sample == name for sample, _ in fleet_metrics), f"the API exports {name}"

    # API: the fleet from PostgreSQL; this module's hosts alone hold VMS * 2 CPUs.
    assert value(fleet_metrics, "vmsched_hosts", status="online") >= HOSTS - 1
    assert value(fleet_metrics, "vmsched_hosts", status="paused") >= 1
    assert ("vmsched_hosts", frozenset({("status", "offline")})) in fleet_metrics
    assert value(fleet_metrics, "vmsched_resource_capacity", resource="cpu") >= HOSTS * 16
    assert value(fleet_metrics, "vmsched_resource_allocated", resource="cpu") >= VMS * 2
    # VMs by status (Orchard's orchard_vms): this module's VMs run; every live status has a series.
    assert value(fleet_metrics, "vmsched_vms", status="running") >= VMS
    for status in ("pending", "scheduled", "unschedulable", "failed", "stopped", "migrating"):
        assert ("vmsched_vms", frozenset({("status", status)})) in fleet_metrics
    assert ("vmsched_vms", frozenset({("status", "deleted")})) not in fleet_metrics
    for resource in ("cpu", "memory_mb", "disk_gb", "gpu"):
        assert value(fleet_metrics, "vmsched_resource_allocated", resource=resource) <= value(
            fleet_metrics, "vmsched_resource_capacity", resource=resource
        )


def lines_about(stack: Stack, service: str, vm_ids: set[str]) -> list[dict[str, object]]:
    return [line for line in stack.log_lines(service) if line.get("vm_id") in vm_ids]


async def test_every_log_line_a_message_causes_names_its_vm_host_trace_and_message(
    stack: Stack, placed: Placed
) -> None:
    vm_ids = set(placed.vm_ids)
    scheduler = lines_about(stack, "scheduler-1", vm_ids)
    gateway = lines_about(stack, "gateway", vm_ids)
    assert {line["vm_id"] for line in scheduler} == vm_ids
    assert {line["vm_id"] for line in gateway} == vm_ids
    for line in scheduler + gateway:
        for key in ("trace_id", "span_id", "message_id", "service", "timestamp", "level"):
            assert line.get(key), f"{key} missing from {line}"
    selected = [line for line in scheduler if line.get("host")]
    assert {line["vm_id"] for line in selected} == vm_ids, "the scheduler names the chosen host"
    assert all(line.get("host") for line in gateway), "the gateway knows the host of every message"
    # The gateway logs under the trace the scheduler logged under: the context travelled in the
    # AMQP headers from one process to the other. (A VM may have more than one trace: the API's
    # sweeper republishes a vm.create whose confirm came late, in a trace of its own.)
    for vm_id in vm_ids:
        scheduled = {line["trace_id"] for line in scheduler if line["vm_id"] == vm_id}
        relayed = {line["trace_id"] for line in gateway if line["vm_id"] == vm_id}
        assert relayed <= scheduled, f"{vm_id}: gateway traces {relayed}, scheduler traces {scheduled}"
