"""Sending a caller's request to one cell's API and its answer back, headers and all that matter.

The caller's ``Authorization`` goes with it: the cell authenticates and authorises the caller as if
it had been asked directly (docs/security.md, "The cell router")."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from fastapi import Response

from vmsched_router import metrics
from vmsched_router.cells import Cell

# What of a caller's request a cell needs, and what of a cell's answer the caller does.
REQUEST_HEADERS = ("authorization", "content-type", "accept", "idempotency-key", "traceparent", "tracestate")
ANSWER_HEADERS = ("content-type", "location", "idempotent-replayed", "www-authenticate", "retry-after")
# Which cell answered: for people and tests; clients need not read it.
CELL_HEADER = "X-Vmsched-Cell"


def request_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in REQUEST_HEADERS if name in headers}


@dataclass(frozen=True, slots=True)
class Answer:
    """A cell's answer to a forwarded request."""

    cell: str
    status: int
    body: bytes
    headers: Mapping[str, str]

    def response(self) -> Response:
        headers = {name: self.headers[name] for name in ANSWER_HEADERS if name in self.headers}
        headers[CELL_HEADER] = self.cell
        return Response(self.body, status_code=self.status, headers=headers)


async def forward(
    cell: Cell,
    method: str,
    path: str,
    headers: Mapping[str, str],
    *,
    body: bytes | None = None,
    params: Mapping[str, str] | None = None,
    route: str,
) -> Answer:
    """``method path`` on ``cell`` with the caller's headers; raises httpx.HTTPError when the cell
    does not answer."""
    started = time.perf_counter()
    try:
        answer = await cell.client.request(
            method, path, headers=request_headers(headers), content=body, params=httpx.QueryParams(params or {})
        )
    except httpx.HTTPError:
        metrics.FORWARDED.labels(cell.name, route, "unreachable").inc()
        raise
    metrics.FORWARD_SECONDS.labels(cell.name).observe(time.perf_counter() - started)
    metrics.FORWARDED.labels(cell.name, route, f"{answer.status_code // 100}xx").inc()
    return Answer(cell.name, answer.status_code, answer.content, answer.headers)
