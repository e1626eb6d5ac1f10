"""Structured logging: one JSON object a line, or a readable console format on a terminal.

Every line a message causes carries what is bound with :func:`bind` (vm_id, host, message_id);
trace_id and span_id are added from the current OpenTelemetry span.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
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
    """One format for every line: vmsched's own (structlog, rendered straight to stderr) and the
    standard library's (uvicorn, faststream, alembic, through a formatter with the same processors).

    vmsched's lines skip the standard library: going through a LogRecord and a second processor
    pass cost about 33 us a line, and the scheduler writes two for every VM it places."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_trace_ids,
        _flatten_extra,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    finish: list[Any] = [
        structlog.processors.format_exc_info,
        structlog.processors.EventRenamer("message") if as_json else _identity,
        _service(service),
        renderer,
    ]
    structlog.configure(
        processors=[structlog.stdlib.add_logger_name, *shared, *finish],
        # Filtered by level before any processor runs (FastStream logs two DEBUG lines per message).
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=_named_writer,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *finish],
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


class _NamedWriteLogger(structlog.WriteLogger):
    """Writes lines to stderr, and knows the name it was made for (``add_logger_name`` reads it)."""

    def __init__(self, name: str) -> None:
        super().__init__(sys.stderr)
        self.name = name


def _named_writer(*args: Any) -> _NamedWriteLogger:
    return _NamedWriteLogger(str(args[0]) if args else "")


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


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger whose lines carry ``logger``: ``name``. Made lazily: modules make theirs at import,
    before the service configures logging, and each takes the configuration of its first use."""
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
