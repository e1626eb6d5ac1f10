"""Where an accepted VM request spends its time: each phase as a span and in one histogram.

A request asking for VMs goes through authentication, the wait for its group's turn, the group's
transaction (checks, insert, quota, audit, commit), the publish of ``vm.create`` with the broker's
confirm, and the published mark. Each is timed here by name, so a slow request can be read off
``/metrics`` (``vmsched_api_request_phase_seconds{phase=...}``) or a trace, without a profiler.
docs/performance.md shows the breakdown at 1 and at 32 clients.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from enum import StrEnum

from opentelemetry import trace
from prometheus_client import Histogram

tracer = trace.get_tracer("vmsched_api.request_phases")


class Phase(StrEnum):
    AUTH = "auth"  # the bearer token looked up (cached) and the rate limit taken
    QUEUED = "queued"  # waiting for the group's transaction to start (others' group in flight)
    CHECKS = "checks"  # server groups, reservations and quota checked (inside the transaction)
    COMMIT = "commit"  # the group's transaction as a whole: checks, insert, quota, audit rows, COMMIT
    PUBLISH = "publish"  # vm.create sent and confirmed by the broker
    MARK = "mark"  # the published mark written (after the confirm)
    AUDIT = "audit"  # an audit row written on its own (requests not audited in their group)


REQUEST_PHASE = Histogram(
    "vmsched_api_request_phase_seconds",
    "Time an accepted VM request spends in each phase (docs/performance.md)",
    ["phase"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.0),
)
_OBSERVERS = {phase: REQUEST_PHASE.labels(phase.value) for phase in Phase}


class timed:  # noqa: N801 - used as a function: ``with timed(Phase.COMMIT):``
    """A span named ``vmsched.request.<phase>`` (when the request's trace is recorded) and the phase's
    histogram, around the block. A class, not a generator: it runs several times a request, and an
    unrecorded span and a generator-based context manager cost more than the phase they time."""

    __slots__ = ("_attributes", "_phase", "_span", "_started")

    def __init__(self, phase: Phase, **attributes: str | int) -> None:
        self._phase = phase
        self._attributes = attributes
        self._span: AbstractContextManager[object] | None = None
        self._started = 0.0

    def __enter__(self) -> None:
        if trace.get_current_span().is_recording():
            self._span = tracer.start_as_current_span(
                f"vmsched.request.{self._phase.value}", attributes=self._attributes
            )
            self._span.__enter__()
        self._started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        _OBSERVERS[self._phase].observe(time.perf_counter() - self._started)
        if self._span is not None:
            self._span.__exit__(*exc)  # type: ignore[arg-type]


def observe(phase: Phase, seconds: float) -> None:
    """A phase timed elsewhere (a wait that is not a block of this request's code)."""
    _OBSERVERS[phase].observe(seconds)
