"""Structured logging: one JSON object a line, or a readable console format on a terminal.

Every line a message causes carries what is bound with :func:`bind` (vm_id, host, message_id);
trace_id and span_id are added from the current OpenTelemetry span.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import structlog
from faststream import BaseMiddleware
from faststream.message import StreamMessage
from opentelemetry import trace

bind = structlog.contextvars.bind_contextvars
bound = structlog.contextvars.bound_contextvars
clear = structlog.contextvars.clear_contextvars


def _add_trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = format(context.trace_id, "032x")
        event["span_id"] = format(context.span_id, "016x")
    return event


def configure_logging(service: str, level: str = "INFO", fmt: str = "auto") -> None:
    """Route structlog and the standard library (uvicorn, faststream, alembic) to one format."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_trace_ids,
        _flatten_extra,
        structlog.processors.EventRenamer("message") if as_json else _identity,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        # filter_by_level first: a structlog logger runs its processors before the standard library
        # looks at the level, and FastStream logs two DEBUG lines per message through one.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared[:-1],
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared[:-1],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            shared[-1],
            _service(service),
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("aiormq", "aio_pika", "asyncio", "httpx"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    # FastStream's own loggers print coloured text to stdout and do not propagate: route them here.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "faststream", "faststream.access.rabbit"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def _flatten_extra(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """FastStream logs its context (queue, exchange, message_id) as ``extra=``: make those fields."""
    extra = event.pop("extra", None)
    if isinstance(extra, dict):
        for key, value in extra.items():
            if value not in (None, ""):
                event.setdefault(key, value)
    return event


def _identity(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    return event


def _service(name: str) -> Any:
    def add(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event.setdefault("service", name)
        return event

    return add


class MessageLogContext(BaseMiddleware):
    """Binds the message's id (and routing key) for every line its handling logs; handlers add
    vm_id and host once they know them. Placed inside the telemetry middleware, so that the
    consume span, and with it trace_id, is current as well."""

    async def consume_scope(self, call_next: Callable[[Any], Awaitable[Any]], msg: StreamMessage[Any]) -> Any:
        raw = msg.raw_message
        with bound(message_id=msg.message_id, routing_key=getattr(raw, "routing_key", None)):
            return await call_next(msg)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
