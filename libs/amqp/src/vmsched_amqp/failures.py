"""What a consumer makes of a handler's failure: a message that can never be processed (a poison
message, dead-lettered with the reason) or a server that did not answer (transient, retried)."""

from __future__ import annotations

import json
import sys

import aiormq
from pydantic import ValidationError


class PoisonMessage(Exception):
    """Raised by a handler for a message that can never be processed (wrong, not unlucky)."""


class TransientError(Exception):
    """Raised by a handler that cannot decide yet (its view is behind); retried like a lost server."""


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    TransientError,
    ConnectionError,
    TimeoutError,
    OSError,
    aiormq.exceptions.AMQPConnectionError,
    aiormq.exceptions.ChannelInvalidStateError,
)
TRANSIENT_RETRY_DELAYS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
# PostgreSQL's "run the transaction again" errors (a deadlock victim, a serialization failure), and
# those of a server going down or coming back (shut down by an administrator or after a crash, still
# recovering: "the database system is not yet accepting connections"). Class 08 (connection
# exceptions) is retried too.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001", "57P01", "57P02", "57P03"})


def is_transient(error: BaseException) -> bool:
    return isinstance(error, TRANSIENT_ERRORS) or _is_transient_database_or_redis(error)


def _is_transient_database_or_redis(error: BaseException) -> bool:
    # Asked only of a process that loaded SQLAlchemy or redis (no other can raise their errors): an
    # agent, whose SDK shares this module, installs neither.
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

        if isinstance(error, DBAPIError):
            if error.connection_invalidated:
                return True
            sqlstate = getattr(error.orig, "sqlstate", None)
            if isinstance(sqlstate, str) and (sqlstate in RETRYABLE_SQLSTATES or sqlstate.startswith("08")):
                return True
        if isinstance(error, OperationalError | InterfaceError):
            return True
    if "redis" in sys.modules:
        import redis.exceptions

        return isinstance(
            error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | redis.exceptions.BusyLoadingError
        )
    return False


def poison_reason(error: BaseException) -> str | None:
    """Why a message can never be processed, or None when the error says nothing about the message."""
    if isinstance(error, PoisonMessage):
        return str(error)
    if isinstance(error, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or 'body'}: {item['msg']}" for item in error.errors()[:5]
        )
        return f"invalid message: {problems}"
    if isinstance(error, json.JSONDecodeError | UnicodeDecodeError):
        return f"undecodable body: {error}"
    return None
