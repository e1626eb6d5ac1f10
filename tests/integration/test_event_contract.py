"""The event contract as a subscriber meets it: the document the API serves is the committed one, and
the subscriber of docs/events.md, run as written, hears a placement."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from devtools.stack import Stack
from tests.fleets import enrolled_fleet
from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import Resources

DOCS = Path(__file__).resolve().parents[2] / "docs"


def without_servers(document: dict[str, Any]) -> dict[str, Any]:
    """A running API names its own broker and virtual host; everything else must be the committed
    contract."""
    document = json.loads(json.dumps(document))
    document.pop("servers")
    for channel in document["channels"].values():
        channel.pop("servers", None)
        channel["bindings"]["amqp"]["exchange"].pop("vhost", None)
    return document


async def test_the_api_serves_the_committed_asyncapi_document(stack: Stack) -> None:
    async with stack.async_client() as api:
        served = await api.get("/asyncapi.json")
        page = await api.get("/asyncapi")
    assert served.status_code == 200
    assert page.status_code == 200
    assert "vmsched events" in page.text
    committed = json.loads((DOCS / "asyncapi.json").read_text())
    assert without_servers(served.json()) == without_servers(committed)


def subscriber_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "events.md").read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "docs/events.md should show one subscriber"
    return str(blocks[0])


async def test_the_subscriber_of_the_events_guide_hears_a_placement(
    stack: Stack, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VMSCHED_AMQP_URL", servers.amqp_url)
    heard: list[str] = []
    namespace: dict[str, Any] = {"__name__": "placements", "print": heard.append}
    exec(compile(subscriber_example(), "docs/events.md", "exec"), namespace)
    broker = namespace["broker"]
    suite = f"events-{uuid.uuid4().hex[:6]}"
    host = HostSpec(id=suite, capacity=Resources(cpu=8, memory_mb=8192, disk_gb=100), labels={"suite": suite})
    async with await enrolled_fleet(servers, [host], heartbeat_interval=1.0):
        await broker.start()
        try:
            async with stack.async_client(timeout=30) as api:
                await eventually(
                    lambda: api.get(f"/v1/hosts/{host.id}"),
                    lambda r: r.status_code == 200 and r.json()["status"] == "online",
                    timeout=60,
                    what="the host online",
                )
                body = {"name": "heard", "cpu": 1, "memory_mb": 512, "disk_gb": 10, "labels": {"suite": suite}}
                body["strategy"] = "least_loaded"
                vm_id = (await api.post("/v1/vms", json=body)).json()["id"]
                await eventually(
                    lambda: api.get(f"/v1/vms/{vm_id}"),
                    lambda r: r.json()["status"] in ("scheduled", "running"),
                    timeout=30,
                    what="the VM placed",
                )
            lines = await eventually(
                _heard(heard), lambda found: any(vm_id in line for line in found), timeout=10, what="vm.assigned"
            )
        finally:
            await broker.stop()
    assert f"{vm_id} (heard, project default) placed on {host.id} by least_loaded" in lines


def _heard(heard: list[str]) -> Any:
    async def probe() -> list[str]:
        return list(heard)

    return probe
