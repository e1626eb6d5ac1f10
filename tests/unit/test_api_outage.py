"""A request whose server does not answer gets 503 with Retry-After (vmsched_api.server_outage), in
process and without servers: PostgreSQL refusing the connection, Redis away, a statement timed out on
the client's side; any other error stays a 500."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import redis.exceptions
from sqlalchemy.exc import DBAPIError, OperationalError

from tests.unit.test_api_requests import TOKEN, in_memory_services, in_process
from vmsched_api.app import build_app
from vmsched_runtime.settings import Settings


class Failing:
    """A repository whose every call raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        async def fail(*_: Any, **__: Any) -> Any:
            raise self.error

        return fail


async def get_vm(error: Exception) -> httpx.Response:
    settings = Settings(bootstrap_token=TOKEN)
    app = build_app(settings, migrate=False, services=in_memory_services(settings, repository=Failing(error)))
    async with in_process(app) as client:
        return await client.get(f"/v1/vms/{uuid.uuid4()}")


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("SELECT 1", {}, ConnectionRefusedError(111, "Connect call failed")),
        ConnectionRefusedError(111, "Connect call failed"),
        TimeoutError(),
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379"),
    ],
    ids=["postgresql-refused", "refused", "timed-out", "redis-away"],
)
async def test_a_server_that_does_not_answer_is_a_503_with_retry_after(error: Exception) -> None:
    response = await get_vm(error)
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert "did not answer" in response.json()["detail"]


class StatementTimedOut(Exception):
    """What asyncpg raises when the server's statement_timeout cancels a statement."""

    sqlstate = "57014"


async def test_a_statement_the_server_timed_out_is_a_503_with_retry_after() -> None:
    # Seen in the soak: DELETEs waiting for rows a sweep held past statement_timeout were 500s.
    response = await get_vm(DBAPIError("UPDATE vms", {}, StatementTimedOut("canceling statement due to timeout")))
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1


async def test_any_other_failure_stays_a_500() -> None:
    with pytest.raises(ValueError, match="a bug"):
        await get_vm(ValueError("a bug"))
