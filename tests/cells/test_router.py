"""Two cells on this machine, each a whole vmsched (API, gateway, scheduler; its own RabbitMQ virtual
host, PostgreSQL database and Redis key prefix) with its own simulated hosts, and the cell router in
front: VMs go to the cell whose labels and room suit them, then to the least-loaded one; requests
about a VM reach its cell; a VM one cell cannot place is tried on the next before the caller is
told; a cell that is down is skipped and shown in /readyz."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.stack import BIN, Stack, bearer, free_port, wait_for
from tests.fleets import enrolled_fleet
from tests.integration.conftest import stack_env
from tests.integration.waiting import eventually
from tests.servers import Servers, drop_database, provide_servers
from vmsched_agent.hosts import generate_hosts
from vmsched_contract.messages import Resources

# Two whole installations and a router: minutes, so with the fault runs (make test-faults).
pytestmark = pytest.mark.slow

TOKEN = "cells-" + uuid.uuid4().hex + uuid.uuid4().hex  # valid in both cells: their bootstrap token


@dataclass
class Cells:
    a: Stack
    b: Stack
    servers: dict[str, Servers]
    router: Stack  # the router's process, run as a Stack's service for its logs and stop
    router_url: str

    def client(self, token: str = TOKEN) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.router_url, headers=bearer(token), timeout=30)


@pytest.fixture(scope="module")
def cell_servers() -> Iterator[tuple[Servers, Servers]]:
    """Each cell's servers of its own: a RabbitMQ virtual host, a PostgreSQL database, a Redis key prefix."""
    with provide_servers() as servers_a, provide_servers() as servers_b:
        yield servers_a, servers_b


@contextlib.contextmanager
def cell(name: str, servers: Servers, log_dir: Path) -> Iterator[Stack]:
    stack = Stack(env=stack_env(servers, VMSCHED_BOOTSTRAP_TOKEN=TOKEN), log_dir=log_dir / name, api_port=free_port())
    with stack.running(schedulers=1):
        yield stack


@pytest.fixture(scope="module")
def cells(cell_servers: tuple[Servers, Servers], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cells]:
    log_dir = Path(tmp_path_factory.mktemp("cells"))
    servers_a, servers_b = cell_servers
    with cell("a", servers_a, log_dir) as a, cell("b", servers_b, log_dir) as b:
        port = free_port()
        router_db = f"vmsched_router_test_{servers_a.run_id}"
        base_db = servers_a.database_url.rsplit("/", 1)[0]
        table = [{"name": name, "url": stack.api_url, "token": TOKEN} for name, stack in (("a", a), ("b", b))]
        router = Stack(
            env={
                "VMSCHED_ROUTER_CELLS": json.dumps(table),
                "VMSCHED_ROUTER_DATABASE_URL": f"{base_db}/{router_db}",
                "VMSCHED_ROUTER_PORT": str(port),
                "VMSCHED_ROUTER_REFRESH_INTERVAL": "0.3",
                "VMSCHED_ROUTER_CELL_TIMEOUT": "5",
                "VMSCHED_BOOTSTRAP_TOKEN": TOKEN,
            },
            log_dir=log_dir / "router",
        )
        service = router.add("router", [str(BIN / "vmsched-router")], ready_url=f"http://127.0.0.1:{port}/readyz")
        service.start(router._env())
        try:
            wait_for(service.is_ready, 60, "the router to be ready")
            yield Cells(a, b, {"a": servers_a, "b": servers_b}, router, f"http://127.0.0.1:{port}")
        finally:
            router.stop()
            with contextlib.suppress(Exception):
                drop_database(servers_a.database_url, router_db)


@pytest.fixture(scope="module")
async def fleets(cells: Cells) -> AsyncIterator[None]:
    """Cell a: two small hosts (8 cpus) in zone a, and one GPU host that an operator will taint.
    Cell b: two larger hosts (16 cpus) in zone b, one with two GPUs."""
    small = Resources(cpu=8, memory_mb=16384, disk_gb=200)
    large = Resources(cpu=16, memory_mb=32768, disk_gb=400)
    hosts_a = generate_hosts(2, prefix="cella", capacity=small, labels={"zone": "a"}) + generate_hosts(
        1, prefix="cellagpu", capacity=Resources(cpu=8, memory_mb=16384, disk_gb=200, gpu=2), labels={"zone": "a"}
    )
    hosts_b = generate_hosts(1, prefix="cellb", capacity=large, labels={"zone": "b"}) + generate_hosts(
        1, prefix="cellbgpu", capacity=Resources(cpu=16, memory_mb=32768, disk_gb=400, gpu=2), labels={"zone": "b"}
    )
    async with (
        await enrolled_fleet(cells.servers["a"], hosts_a, heartbeat_interval=1.0),
        await enrolled_fleet(cells.servers["b"], hosts_b, heartbeat_interval=1.0),
    ):
        for stack, count in ((cells.a, 3), (cells.b, 2)):
            await hosts_online(stack, count)
        # The router has read both summaries with every host in them (the cells' own summaries having
        # them is not enough: the router may have read one just before its hosts came).
        async with cells.client() as router:
            await eventually(
                lambda: summaries(cells),
                lambda found: [s["schedulable_hosts"] for s in found] == [3, 2],
                timeout=30,
                what="both summaries",
            )
            await eventually(
                lambda: router.get("/readyz"),
                lambda r: (
                    {name: c.get("schedulable_hosts") for name, c in r.json()["cells"].items()} == {"a": 3, "b": 2}
                ),
                timeout=30,
                what="both cells in the router, with every host",
            )
        yield


SMALL = {"cpu": 1, "memory_mb": 512, "disk_gb": 5}


def zone(name: str) -> list[dict[str, Any]]:
    return [{"key": "zone", "operator": "In", "values": [name]}]


async def hosts_online(stack: Stack, count: int) -> None:
    async with stack.async_client() as api:
        await eventually(
            lambda: api.get("/v1/hosts"),
            lambda r: sum(h["status"] == "online" for h in r.json()) == count,
            timeout=60,
            what="the cell's hosts online",
        )


async def summaries(cells: Cells) -> list[dict[str, Any]]:
    found = []
    for stack in (cells.a, cells.b):
        async with stack.async_client() as api:
            found.append((await api.get("/v1/summary")).json())
    return found


async def settled(router: httpx.AsyncClient, vm_id: str) -> dict[str, Any]:
    answer = await eventually(
        lambda: router.get(f"/v1/vms/{vm_id}"),
        lambda r: r.status_code == 200 and r.json()["status"] not in ("pending", "scheduled"),
        timeout=30,
        what=f"VM {vm_id} running or refused",
    )
    return dict(answer.json())


async def test_a_cell_summary_counts_room_per_label_set_never_per_host(cells: Cells, fleets: None) -> None:
    async with cells.a.async_client() as api:
        summary = (await api.get("/v1/summary")).json()
    assert (summary["hosts"], summary["schedulable_hosts"], summary["waiting"]) == (3, 3, 0)
    (zone_a,) = summary["label_sets"]
    assert zone_a["labels"] == {"zone": "a"}
    assert zone_a["hosts"] == 3
    assert zone_a["largest"]["gpu"] == 2
    assert summary["allocatable"]["cpu"] == 24
    assert "cella-0001" not in json.dumps(summary)


async def test_a_vm_selecting_a_zone_goes_to_the_cell_that_has_it(cells: Cells, fleets: None) -> None:
    body = {"name": "zoned", "cpu": 2, "memory_mb": 1024, "disk_gb": 10}
    selector = [{"key": "zone", "operator": "In", "values": ["b"]}]
    async with cells.client() as router:
        created = await router.post("/v1/vms", json={**body, "host_selector": selector})
        assert created.status_code == 202, created.text
        assert created.headers["X-Vmsched-Cell"] == "b"
        vm = await settled(router, created.json()["id"])
        assert vm["status"] == "running"
        assert vm["hypervisor_id"].startswith("cellb")
    async with cells.a.async_client() as a, cells.b.async_client() as b:
        assert (await a.get(f"/v1/vms/{vm['id']}")).status_code == 404
        assert (await b.get(f"/v1/vms/{vm['id']}")).json()["status"] == "running"


async def test_a_vm_too_large_for_one_cell_goes_to_the_cell_with_room(cells: Cells, fleets: None) -> None:
    async with cells.client() as router:
        created = await router.post("/v1/vms", json={"name": "large", "cpu": 12, "memory_mb": 4096, "disk_gb": 10})
        assert created.status_code == 202, created.text
        assert created.headers["X-Vmsched-Cell"] == "b"
        assert (await settled(router, created.json()["id"]))["hypervisor_id"].startswith("cellb")


async def test_a_small_vm_goes_to_the_least_loaded_cell(cells: Cells, fleets: None) -> None:
    async with cells.client() as router:
        # Cell b holds the VMs of the tests above: the router's summary of it says so.
        await eventually(
            lambda: router.get("/readyz"),
            lambda r: r.json()["cells"]["b"]["load"] > r.json()["cells"]["a"]["load"],
            timeout=30,
            what="cell b loaded more than cell a",
        )
        created = await router.post("/v1/vms", json={"name": "small", "cpu": 1, "memory_mb": 512, "disk_gb": 5})
        assert created.status_code == 202, created.text
        assert created.headers["X-Vmsched-Cell"] == "a"
        batch = await router.post(
            "/v1/vms/batch",
            json={"vms": [{"name": f"few-{i}", "cpu": 1, "memory_mb": 512, "disk_gb": 5} for i in range(3)]},
        )
        assert batch.status_code == 202, batch.text
        assert batch.headers["X-Vmsched-Cell"] == "a"
        assert len(batch.json()["items"]) == 3
        for item in batch.json()["items"]:
            assert (await settled(router, item["id"]))["hypervisor_id"].startswith("cella")


async def test_a_vm_one_cell_cannot_place_is_tried_on_the_next_before_the_caller_is_told(
    cells: Cells, fleets: None
) -> None:
    # Cell a's GPU host is tainted: its summary still counts the GPUs (taints are not summarised), so
    # the router tries cell a first (least loaded), whose scheduler refuses; cell b places it.
    async with cells.a.async_client() as a:
        tainted = await a.patch(
            "/v1/hosts/cellagpu-0001", json={"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}
        )
        assert tainted.status_code == 200, tainted.text
    async with cells.client() as router:
        body = {"name": "gpu", "cpu": 1, "memory_mb": 512, "disk_gb": 5, "gpu": 1}
        key = {"Idempotency-Key": f"gpu-{uuid.uuid4()}"}
        created = await router.post("/v1/vms", json=body, headers=key)
        assert created.status_code == 202, created.text
        assert created.headers["X-Vmsched-Cell"] == "b"
        # The same request again is replayed by the cell that kept the VM, not the one that refused it.
        again = await router.post("/v1/vms", json=body, headers=key)
        assert (again.headers["X-Vmsched-Cell"], again.headers.get("Idempotent-Replayed")) == ("b", "true")
        assert again.json()["id"] == created.json()["id"]
        vm = await settled(router, created.json()["id"])
        assert vm["status"] == "running"
        assert vm["hypervisor_id"] == "cellbgpu-0001"
        # In a batch, only the VMs cell a refuses go to cell b; the caller gets them all, in order.
        batch = await router.post(
            "/v1/vms/batch", json={"vms": [{**body, "name": "gpu-2"}, {**SMALL, "name": "plain"}]}
        )
        assert batch.status_code == 202, batch.text
        first, second = [await settled(router, item["id"]) for item in batch.json()["items"]]
        assert (first["name"], first["hypervisor_id"]) == ("gpu-2", "cellbgpu-0001")
        assert second["name"] == "plain"
        assert second["hypervisor_id"].startswith("cella")
        metrics = (await router.get("/metrics")).text
    assert 'vmsched_router_retried_vms_total{cell="a"} 2.0' in metrics
    # What cell a was asked for is deleted there: the caller never saw it.
    async with cells.a.async_client() as a:
        listed = (await a.get("/v1/vms", params={"limit": 1000})).json()["items"]
    assert [vm["status"] for vm in listed if vm["name"].startswith("gpu")] == ["deleted", "deleted"]


async def test_requests_about_a_vm_reach_its_cell_even_one_the_router_never_saw(cells: Cells, fleets: None) -> None:
    async with cells.a.async_client() as a:
        direct = await a.post("/v1/vms", json={"name": "direct", "cpu": 1, "memory_mb": 512, "disk_gb": 5})
        assert direct.status_code == 202
    vm_id = direct.json()["id"]
    async with cells.client() as router:
        seen = await settled(router, vm_id)
        assert seen["hypervisor_id"].startswith("cella")
        placement = await router.get(f"/v1/vms/{vm_id}/placement")
        assert placement.status_code == 200
        assert placement.headers["X-Vmsched-Cell"] == "a"
        deleted = await router.delete(f"/v1/vms/{vm_id}")
        assert deleted.status_code == 202, deleted.text
        await eventually(
            lambda: router.get(f"/v1/vms/{vm_id}"),
            lambda r: r.json()["status"] == "deleted",
            timeout=30,
            what="the VM deleted",
        )
        assert (await router.get(f"/v1/vms/{uuid.uuid4()}")).status_code == 404
        assert (await router.get("/v1/vms/x", headers={"Authorization": "Bearer nope"})).status_code == 401
        # Lists merge every cell's.
        hosts = (await router.get("/v1/hosts")).json()
        assert {host["id"] for host in hosts} >= {"cella-0001", "cellb-0001"}
        names: set[str] = set()
        cursor: str | None = None
        for _ in range(20):
            page = (await router.get("/v1/vms", params={"limit": 2, **({"cursor": cursor} if cursor else {})})).json()
            names |= {vm["name"] for vm in page["items"]}
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert {"zoned", "large", "small", "direct", "gpu"} <= names


def create_token(stack: Stack, *args: str, secret: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "vmsched-api"), "create-token", "--project", "default", "--scope", "vms:write", *args],
        env={**stack.env, "PATH": "/usr/bin:/bin"},
        input=secret,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_one_project_token_made_in_every_cell_works_through_the_router(cells: Cells, fleets: None) -> None:
    made = await asyncio.to_thread(create_token, cells.a)
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    async with cells.client(secret) as router:
        # Known in cell a only: cell b refuses it, whatever the router chose.
        refused = await router.post("/v1/vms", json={**SMALL, "name": "t-b", "host_selector": zone("b")})
        assert (refused.status_code, refused.headers["X-Vmsched-Cell"]) == (401, "b")
        copied = await asyncio.to_thread(create_token, cells.b, "--secret-from-stdin", secret=secret + "\n")
        assert copied.returncode == 0, copied.stderr
        assert copied.stdout.strip() == secret
        for cell in ("a", "b"):
            created = await router.post("/v1/vms", json={**SMALL, "name": f"t-{cell}", "host_selector": zone(cell)})
            assert (created.status_code, created.headers["X-Vmsched-Cell"]) == (202, cell), created.text
    garbage = await asyncio.to_thread(create_token, cells.b, "--secret-from-stdin", secret="short\n")
    assert garbage.returncode == 2


async def test_a_cell_down_is_skipped_for_new_vms_and_shown_in_readyz(cells: Cells, fleets: None) -> None:
    cells.b.services["api"].stop()
    async with cells.client() as router:
        ready = await eventually(
            lambda: router.get("/readyz"),
            lambda r: r.json()["cells"]["b"]["state"] != "ok",
            timeout=30,
            what="cell b shown down",
        )
        assert ready.status_code == 200  # cell a still takes VMs
        assert ready.json()["cells"]["a"]["state"] == "ok"
        # Even a VM cell b would suit better (room for 12 cpus) goes to a cell that answers.
        created = await router.post("/v1/vms", json={"name": "while-b-down", "cpu": 1, "memory_mb": 512, "disk_gb": 5})
        assert created.status_code == 202, created.text
        assert created.headers["X-Vmsched-Cell"] == "a"
