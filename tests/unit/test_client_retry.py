"""The client sends a 429 or a 503 again, after the server's Retry-After or an exponential backoff,
and raises the error of the status once the attempts are spent; nothing else is sent twice."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from vmsched_client import AsyncClient, Client, NotFound, RetryPolicy, Unavailable
from vmsched_client.retry import parse_retry_after

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
VM_ID = "00000000-0000-0000-0000-000000000001"
VM: dict[str, object] = {
    "id": VM_ID,
    "name": "a",
    "status": "pending",
    "hypervisor_id": None,
    "status_reason": None,
    "cpu": 1,
    "memory_mb": 1,
    "disk_gb": 1,
    "gpu": 0,
    "labels": {},
    "host_selector": [],
    "strategy": None,
    "restart_policy": "never",
    "restart_count": 0,
    "attempt": 1,
    "attempts": [],
    "created_at": None,
    "scheduled_at": None,
    "started_at": None,
    "project": "default",
}


def test_retry_after_is_read_as_seconds_or_as_a_date() -> None:
    assert parse_retry_after("3", NOW) == 3.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:07 GMT", NOW) == 7.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", NOW) == 0.0
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after(None, NOW) is None


def test_the_policy_backs_off_exponentially_up_to_its_cap_and_honours_retry_after() -> None:
    policy = RetryPolicy(attempts=6, base=0.5, cap=3.0)
    assert [policy.delay(n, 503, None, NOW) for n in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, None]
    assert policy.delay(1, 429, "2", NOW) == 2.0
    assert policy.delay(1, 429, "3600", NOW) == 3.0  # never longer than the cap
    assert policy.delay(1, 500, None, NOW) is None
    assert policy.delay(1, 404, "1", NOW) is None


def answers(*responses: httpx.Response) -> tuple[list[httpx.Request], httpx.MockTransport]:
    sent: list[httpx.Request] = []
    queue = list(responses)

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return queue.pop(0)

    return sent, httpx.MockTransport(handle)


def test_a_429_is_sent_again_after_its_retry_after() -> None:
    sent, transport = answers(
        httpx.Response(429, headers={"Retry-After": "2"}, json={"detail": "slow down"}), httpx.Response(200, json=VM)
    )
    slept: list[float] = []
    with Client("http://api", "t", transport=transport, sleep=slept.append) as client:
        assert client.get_vm(VM_ID).name == "a"
    assert slept == [2.0]
    assert len(sent) == 2
    assert sent[0].headers["Authorization"] == "Bearer t"


def test_a_503_that_lasts_raises_unavailable_once_the_attempts_are_spent() -> None:
    sent, transport = answers(*[httpx.Response(503, json={"detail": "not ready"})] * 3)
    slept: list[float] = []
    policy = RetryPolicy(attempts=3, base=0.1)
    with (
        Client("http://api", "t", transport=transport, sleep=slept.append, retry=policy) as client,
        pytest.raises(Unavailable, match="not ready"),
    ):
        client.get_vm(VM_ID)
    assert slept == [0.1, 0.2]
    assert len(sent) == 3


def test_a_post_retried_carries_the_same_idempotency_key() -> None:
    from vmsched_contract.api import VmRequest

    sent, transport = answers(httpx.Response(503), httpx.Response(202, json=VM))
    with Client("http://api", "t", transport=transport, sleep=lambda _: None) as client:
        client.create_vm(VmRequest(name="a", disk_gb=1))
    assert sent[0].headers["Idempotency-Key"] == sent[1].headers["Idempotency-Key"]
    assert sent[0].content == sent[1].content == b'{"name":"a","disk_gb":1}'  # unset fields left to the API


def test_a_404_is_not_sent_again() -> None:
    sent, transport = answers(httpx.Response(404, json={"detail": "no VM"}))
    with (
        Client("http://api", "t", transport=transport, sleep=lambda _: pytest.fail("slept")) as client,
        pytest.raises(NotFound, match="no VM") as raised,
    ):
        client.get_vm(VM_ID)
    assert raised.value.status_code == 404
    assert len(sent) == 1


async def test_the_asyncio_client_retries_alike() -> None:
    _, transport = answers(httpx.Response(429, headers={"Retry-After": "1"}), httpx.Response(200, json=VM))
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async with AsyncClient("http://api", "t", transport=transport, sleep=sleep) as client:
        assert (await client.get_vm(VM_ID)).status.value == "pending"
    assert slept == [1.0]
