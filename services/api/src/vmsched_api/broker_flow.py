"""The refusal of a request that would publish while the broker blocks publishers (a memory or disk
alarm, :mod:`vmsched_amqp.flow`): 503 with Retry-After at once, nothing changed, rather than a
request that hangs until the alarm clears. Called first thing in the route's body, after FastAPI
has checked the request (bad input is still a 422 that touched nothing)."""

from __future__ import annotations

from fastapi import HTTPException, status

from vmsched_amqp.flow import BLOCKED_RETRY_AFTER
from vmsched_amqp.publishing import Publisher
from vmsched_api.refusals import refusals

# What a route that publishes may answer besides its own refusals.
BROKER_REFUSAL = refusals(503)


async def refuse_while_broker_blocks(publisher: Publisher) -> None:
    """Raise 503 (``Retry-After``) while the broker blocks this process's publishing connection."""
    if await publisher.blocked():
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "the message broker takes no messages now (a memory or disk alarm); nothing was changed, ask again later",
            headers={"Retry-After": str(BLOCKED_RETRY_AFTER)},
        )
