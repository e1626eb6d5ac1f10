"""VMSCHED_RESTART_UNFENCED=false with no fence command (docs/operations.md#fencing): a lost host's
VMs stay ``unknown`` and ``host.fence_needed`` says so once, until an operator fences the host."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from devtools.stack import Stack
from tests.faults.conftest import fault_stack, wait_settled
from tests.faults.invariants import check
from tests.faults.test_fencing import LOST_TIMEOUT, OFFLINE_TIMEOUT, fleet, hosts_of, statuses, vms_on
from tests.integration.amqp_tools import Tap
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_amqp import topology

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def unfenced_stack(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with fault_stack(
        servers,
        Path(tmp_path_factory.mktemp("fence-needed-logs")),
        schedulers=1,
        VMSCHED_AGENT_OFFLINE_TIMEOUT=str(OFFLINE_TIMEOUT),
        VMSCHED_AGENT_LOST_TIMEOUT=str(LOST_TIMEOUT),
        VMSCHED_RESTART_DELAY="1",
        VMSCHED_RESTART_UNFENCED="false",
    ) as stack:
        yield stack


@pytest.fixture
async def api(unfenced_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with unfenced_stack.async_client(timeout=30) as client:
        yield client


async def test_a_lost_unfenced_host_keeps_its_vms_unknown_and_asks_for_a_fence(
    api: httpx.AsyncClient, servers: Servers
) -> None:
    labels = {"suite": "fenceneeded"}
    async with (
        fleet(servers, api, "fnd-live", labels),
        fleet(servers, api, "fnd-lost", labels) as lost,
        Tap(servers.amqp_url, topology.EXCHANGE.name, topology.HOST_FENCE_NEEDED) as needed,
    ):
        ids = await vms_on(api, "fnd-live-0001", "fnd-lost-0001", labels, 2)
        await lost.cut_off("fnd-lost-0001")
        event = await needed.wait(lambda m: json.loads(m.body)["host_id"] == "fnd-lost-0001", timeout=LOST_TIMEOUT + 30)
        assert "POST /v1/hosts/fnd-lost-0001/fence" in json.loads(event.body)["detail"]
        await asyncio.sleep(3.0)  # three health checks more: still nothing failed, said once
        assert await statuses(api, ids) == {"unknown"}
        assert len([m for m in needed.messages if json.loads(m.body)["host_id"] == "fnd-lost-0001"]) == 1
        assert (await api.post("/v1/hosts/fnd-lost-0001/fence")).status_code == 200
        await eventually(lambda: hosts_of(api, ids), lambda h: h == {"fnd-live-0001"}, timeout=30, what="moved")
        await eventually(lambda: statuses(api, ids), lambda s: s == {"running"}, timeout=30, what="running again")
        await wait_settled(servers, ids, timeout=30)
        report = await check(servers.asyncpg_dsn, ids)
    assert report.problems == []
