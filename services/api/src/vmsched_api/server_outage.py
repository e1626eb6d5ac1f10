"""The answer to a request whose server did not answer: PostgreSQL, Redis or the broker refused the
connection, dropped it, or stayed silent past the client's timeout (a partition). 503 with
``Retry-After``: the request may be asked again as it is, and nothing it asked for was changed
(a transaction not committed is rolled back by the server; a change committed before the failure
is one the request's answer would have confirmed, and asking again finds it). Any other error stays
a 500."""

from __future__ import annotations

import redis.exceptions
from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from vmsched_amqp.failures import is_transient
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)

RETRY_AFTER = 5
# What a failed connection raises, by library (TimeoutError and ConnectionError are OSErrors); the
# handler asks ``is_transient`` of each.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    DBAPIError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)


# query_canceled: the server's statement_timeout (vmsched_pg.engine) cut a statement that waited
# too long, for a lock most often (a sweep that holds many rows): rolled back, and asking again
# is safe. Only the API reads it so; a consumer's retry of it stays its own choice.
STATEMENT_TIMED_OUT = "57014"


def _timed_out(error: Exception) -> bool:
    return isinstance(error, DBAPIError) and getattr(error.orig, "sqlstate", None) == STATEMENT_TIMED_OUT


async def answer_outage(request: Request, error: Exception) -> JSONResponse:
    if not (is_transient(error) or _timed_out(error)):
        log.error("request failed", path=request.url.path, error=repr(error))
        return JSONResponse({"detail": "internal error"}, status_code=status.HTTP_500_INTERNAL_SERVER_ERROR)
    log.warning("request failed: a server did not answer", path=request.url.path, error=repr(error))
    return JSONResponse(
        {"detail": "a server vmsched needs (PostgreSQL, Redis or the broker) did not answer; ask again later"},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(RETRY_AFTER)},
    )


def add_outage_answers(application: FastAPI) -> None:
    for error in OUTAGE_ERRORS:
        application.add_exception_handler(error, answer_outage)
