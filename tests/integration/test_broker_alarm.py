"""The broker's memory alarm (publishers blocked, vmsched_amqp.flow): the API answers 503 with
Retry-After instead of hanging, and takes VM requests again by itself once the alarm clears; what it
accepted just before is published then.

The alarm is the shared broker's: it is raised for a few seconds only, and always lowered again."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import httpx
import pytest

from devtools.stack import wait_for
from tests.servers import Servers

# The alarm blocks every publisher on the broker, another worker's tests' too.
pytestmark = pytest.mark.alone

# Longest a request may take during the alarm: well under a client's patience.
ANSWER_WITHIN = 7.0
ALARM_AT_MOST = 20.0


@contextlib.contextmanager
def memory_alarm(servers: Servers) -> Iterator[None]:
    """The broker's memory alarm, on: its watermark under what it already uses."""
    before = servers.rabbitmqctl("eval", "vm_memory_monitor:get_vm_memory_high_watermark().").strip()
    servers.rabbitmqctl("set_vm_memory_high_watermark", "0.0000001")
    try:
        yield
    finally:
        restore = before if before.replace(".", "", 1).isdigit() else "0.4"
        servers.rabbitmqctl("set_vm_memory_high_watermark", restore)


def ask(api: httpx.Client, name: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = api.post("/v1/vms", json={"name": name, "cpu": 1, "memory_mb": 256, "disk_gb": 1})
    return response, time.monotonic() - started


def test_while_the_broker_blocks_publishers_vm_requests_get_503_with_retry_after_then_pass_again(
    api: httpx.Client, servers: Servers
) -> None:
    accepted: list[str] = []
    refused: list[httpx.Response] = []
    slowest = 0.0
    with memory_alarm(servers):
        deadline = time.monotonic() + ALARM_AT_MOST
        while not refused and time.monotonic() < deadline:
            response, took = ask(api, "alarm")
            slowest = max(slowest, took)
            if response.status_code == 202:
                accepted.append(response.json()["id"])
            else:
                refused.append(response)
        delete = api.delete(f"/v1/vms/{accepted[0]}") if accepted else None

    assert refused, "no request was refused while the broker blocked publishers"
    assert refused[0].status_code == 503, refused[0].text
    assert int(refused[0].headers["Retry-After"]) >= 1
    assert "broker" in refused[0].json()["detail"]
    assert slowest < ANSWER_WITHIN
    if delete is not None:
        assert delete.status_code in (202, 503), delete.text

    # Back by itself: new requests pass, and what was accepted before the refusals is published.
    wait_for(lambda: ask(api, "after")[0].status_code == 202, 30, "a VM request accepted again", interval=0.5)

    def decided() -> bool:
        return all(api.get(f"/v1/vms/{vm_id}").json()["status"] != "pending" for vm_id in accepted)

    wait_for(decided, 30, f"the VMs accepted as the alarm began ({len(accepted)}) to be decided", interval=0.5)
