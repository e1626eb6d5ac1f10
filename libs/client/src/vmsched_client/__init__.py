"""vmsched's Python client: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio), on httpx,
typed with the models the API serves (:mod:`vmsched_contract.api`). Its only dependencies are httpx
and pydantic; the ``vmsched`` operator CLI (:mod:`vmsched_client.cli`, the ``cli`` extra) is built on it.

Both clients come from one source. Each request is described once (:mod:`~vmsched_client.calls`),
and what reads an answer once (:mod:`~vmsched_client._http`); the asyncio client
(:mod:`~vmsched_client.aio`) is the only hand-written client, and the blocking one
(:mod:`~vmsched_client.sync`) is written from it by ``make sync-client`` (unasync), committed, and
checked by a test that fails while it differs from what the generation writes. Why generated
rather than two thin shells over one shared core: a method's signature is its public API, and
Python's types cannot say "returns T here, an awaitable of T there" once, so two shells would each
declare every method again, the repetition this removes. The generated file is plain code that
mypy, the tests and a reader see as it runs.
"""

from vmsched_client._http import PLACED, WaitTimeout, decided
from vmsched_client.aio import AsyncClient
from vmsched_client.config import ClientConfig
from vmsched_client.errors import (
    ApiError,
    ClientError,
    ConfigError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    RateLimited,
    Unauthorized,
    Unavailable,
)
from vmsched_client.retry import NO_RETRIES, RetryPolicy
from vmsched_client.sse import Event
from vmsched_client.sync import Client

__all__ = [
    "NO_RETRIES",
    "PLACED",
    "ApiError",
    "AsyncClient",
    "Client",
    "ClientConfig",
    "ClientError",
    "ConfigError",
    "Conflict",
    "Event",
    "Forbidden",
    "Gone",
    "Invalid",
    "NotFound",
    "RateLimited",
    "RetryPolicy",
    "Unauthorized",
    "Unavailable",
    "WaitTimeout",
    "decided",
]
