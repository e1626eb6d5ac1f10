"""GET /v1/events: the events stream (``topology.EVENTS_STREAM``) as server-sent events.

Each client reads the stream from an offset of its own on a channel of its own; nothing is taken from
anyone. An event's SSE ``id`` is its offset in the stream, the same on every API replica, so a client
that reconnects anywhere with ``Last-Event-ID: n`` gets every event after ``n`` that its filters let
through, and nothing twice. Filtering happens here, not in the broker: by routing key (``type``) and
by project, a VM event's VMs outside the project being left out of the copy the client gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from aio_pika.abc import AbstractConnection, AbstractIncomingMessage

from vmsched_amqp import topology
from vmsched_amqp.channels import plain_channel
from vmsched_contract.messages import DEFAULT_PROJECT

# Unacked events in flight to one client: the broker waits for a slow client's acks beyond this.
PREFETCH = 100
# A comment line this often keeps proxies from closing a quiet connection.
KEEPALIVE_SECONDS = 15.0
# Where a client without Last-Event-ID starts: what is published from now on.
FROM_NOW = "next"
OFFSET_HEADER = "x-stream-offset"
# The lists of VMs a VM event may carry, each VM naming its project.
VM_LISTS = ("vms", "assignments")


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a client gets: these routing keys (empty: every one), VMs of this project (None:
    every project, and the events that name none, such as an agent's ``vm.status``)."""

    types: frozenset[str] = frozenset()
    project: str | None = None


def visible(routing_key: str, body: Mapping[str, Any], wanted: EventFilter) -> Mapping[str, Any] | None:
    """What of one event a client gets: the event, its VMs of other projects left out; None when
    nothing of it is for the client."""
    if wanted.types and routing_key not in wanted.types:
        return None
    if wanted.project is None:
        return body
    if isinstance(body.get("project"), str):
        return body if body["project"] == wanted.project else None
    for key in VM_LISTS:
        vms = body.get(key)
        if isinstance(vms, list):
            mine = [vm for vm in vms if isinstance(vm, dict) and vm.get("project", DEFAULT_PROJECT) == wanted.project]
            return {**body, key: mine} if mine else None
    return None  # names no project: not a project's to see


def start_offset(last_event_id: str | None) -> int | str:
    """The stream offset to read from: right after ``Last-Event-ID``, else from now on. Raises
    ``ValueError`` for an id that is not an offset."""
    if last_event_id is None or not last_event_id.strip():
        return FROM_NOW
    last = int(last_event_id.strip())
    if last < 0:
        raise ValueError("an event id is an offset, at least 0")
    return last + 1


def sse(offset: int, event_type: str, body: Mapping[str, Any]) -> str:
    """One server-sent event (JSON on one data line)."""
    return f"id: {offset}\nevent: {event_type}\ndata: {json.dumps(body, separators=(',', ':'), default=str)}\n\n"


async def follow(connection: AbstractConnection, offset: int | str, wanted: EventFilter) -> AsyncIterator[str]:
    """Server-sent events from ``offset`` on, forever: those ``wanted`` lets through, and a keep-alive
    comment after each quiet ``KEEPALIVE_SECONDS``. Closing the iterator stops the consumer."""
    channel = await plain_channel(connection)
    inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
    try:
        await channel.set_qos(prefetch_count=PREFETCH)
        stream = await channel.declare_queue(topology.EVENTS_STREAM.name, passive=True)
        await stream.consume(inbox.put, arguments={OFFSET_HEADER: offset})
        yield ": following vmsched events\n\n"  # the response starts now: the client knows it is connected
        while True:
            try:
                message = await asyncio.wait_for(inbox.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                if channel.is_closed:
                    # The broker connection was lost (it reconnects, this consumer does not): end the
                    # response, and the client comes back with Last-Event-ID.
                    return
                yield ": keep-alive\n\n"
                continue
            event = _event(message, wanted)
            if event is not None:
                yield event
            await message.ack()  # a stream's ack only lets the broker send more
    finally:
        with contextlib.suppress(Exception):
            await channel.close()


def _event(message: AbstractIncomingMessage, wanted: EventFilter) -> str | None:
    routing_key = message.routing_key or ""
    offset = message.headers.get(OFFSET_HEADER)
    if not isinstance(offset, int):
        return None
    try:
        body = json.loads(message.body)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    shown = visible(routing_key, body, wanted)
    return None if shown is None else sse(offset, routing_key, shown)
