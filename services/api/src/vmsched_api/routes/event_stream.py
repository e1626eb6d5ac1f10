"""GET /v1/events: vmsched's VM events as server-sent events (docs/events.md), for a client that
cannot speak AMQP; resumable on any replica with ``Last-Event-ID``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, status
from fastapi.responses import StreamingResponse

from vmsched_api.deps import ServicesDep
from vmsched_api.event_feed import EventFilter, follow, start_offset
from vmsched_api.identity.auth import VmsReader
from vmsched_contract.messages import ProjectName

router = APIRouter(tags=["events"])

EVENT_STREAM = "text/event-stream"


@router.get(
    "/events",
    response_class=StreamingResponse,
    responses={200: {"content": {EVENT_STREAM: {}}, "description": "server-sent events, until the client leaves"}},
)
async def events(
    services: ServicesDep,
    principal: VmsReader,
    event_type: Annotated[
        list[str] | None,
        Query(alias="type", max_length=32, description="only these routing keys (vm.assigned, ...); repeat for more"),
    ] = None,
    project: Annotated[
        ProjectName | None, Query(description="admin tokens: only this project's VMs (others see only their own)")
    ] = None,
    last_event_id: Annotated[
        str | None, Header(max_length=32, description="resume after this event id (what EventSource sends)")
    ] = None,
) -> StreamingResponse:
    """Every VM event from now on (or after ``Last-Event-ID``), as ``id: <offset>``, ``event: <routing
    key>``, ``data: <the message's JSON>``. A token that is not an admin's sees its project's VMs only."""
    try:
        offset = start_offset(last_event_id)
    except ValueError:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["header", "last-event-id"], "msg": "an event id is a whole number", "type": "value_error"}],
        ) from None
    wanted = EventFilter(types=frozenset(event_type or ()), project=principal.project_filter(project))
    connection = await services.broker.connect()

    async def stream() -> AsyncIterator[str]:
        async for chunk in follow(connection, offset, wanted):
            yield chunk

    return StreamingResponse(
        stream(),
        media_type=EVENT_STREAM,
        # No proxy may buffer or cache the stream (nginx reads X-Accel-Buffering).
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
