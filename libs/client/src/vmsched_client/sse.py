"""Server-sent events (text/event-stream), as the WHATWG spec parses them: pure, a line at a time."""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Event:
    """One event of ``GET /v1/events``: its id (to resume from), its type (``vm.assigned``, ...) and
    its data (the message's JSON, decoded; the raw text when it is not JSON)."""

    id: str | None
    type: str
    data: Any

    def parse(self, model: builtins.type[M]) -> M:
        """The data as a contract model, e.g. ``event.parse(VmAssigned)``."""
        parsed: M = model.model_validate(self.data)
        return parsed


@dataclass(slots=True)
class SseParser:
    """Feed it the stream's lines; it answers an :class:`Event` when a blank line ends one.

    ``last_event_id`` is the id of the last event dispatched (what ``Last-Event-ID`` resumes from): an
    ``id:`` line takes effect only when its event ends, so one cut off by a break is not skipped."""

    last_event_id: str | None = None
    retry_ms: int | None = None
    _id: str | None = None
    _type: str = ""
    _data: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self._id is None:
            self._id = self.last_event_id

    def feed(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: the server's keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._type = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        self.last_event_id = self._id
        data, kind = self._data, self._type or "message"
        self._data, self._type = [], ""
        if not data:
            return None
        text = "\n".join(data)
        try:
            decoded: Any = json.loads(text)
        except ValueError:
            decoded = text
        return Event(id=self.last_event_id, type=kind, data=decoded)
