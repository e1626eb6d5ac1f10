"""vmsched's Python client: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio), on httpx,
typed with the models the API serves (:mod:`vmsched_contract.api`). Its only dependencies are httpx
and pydantic; the ``vmsched`` operator CLI (:mod:`vmsched_client.cli`, the ``cli`` extra) is built on it.
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
