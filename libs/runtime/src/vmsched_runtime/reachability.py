"""Whether the servers a process needs answer, said in one line per server that does not: its name,
where (the URL without its password), the setting that names it and why."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from vmsched_runtime.settings import ENV_PREFIX, Settings

CONNECT_TIMEOUT = 5.0


def _no_hint(error: BaseException) -> str:
    return ""


@dataclass(frozen=True, slots=True)
class Server:
    """A server a service needs before it starts: its name for people, the setting that names it
    (without ``VMSCHED_``), and how to reach it. Each adapter says so of its own server
    (``vmsched_amqp.nodes.BROKER``, ``vmsched_redis.connections.REDIS``,
    ``vmsched_pg.engine.DATABASE``), so that this package needs none of their clients."""

    name: str
    setting: str
    url: Callable[[Settings], str]
    reach: Callable[[Settings], Awaitable[None]]  # returns once it answered, raises why it did not
    hint: Callable[[BaseException], str] = _no_hint  # said after the reason, for a failure it explains


def redacted(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def why(error: BaseException) -> str:
    """The error in one line: its type and the first line of its message."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def unreachable(settings: Settings, servers: Sequence[Server]) -> list[str]:
    """One line per server among ``servers`` that does not answer, naming it, its setting and why.
    The clients' own log lines about the failure are held back: the one line says it all."""
    problems = []
    logging.disable(logging.CRITICAL)
    try:
        for server in servers:
            problems += await _problem(server, settings)
    finally:
        logging.disable(logging.NOTSET)
    return problems


async def _problem(server: Server, settings: Settings) -> list[str]:
    try:
        await asyncio.wait_for(server.reach(settings), CONNECT_TIMEOUT * 2)
    except Exception as error:
        return [
            f"cannot reach {server.name} at {redacted(server.url(settings))} "
            f"({ENV_PREFIX}{server.setting}): {why(error)}{server.hint(error)}"
        ]
    return []
