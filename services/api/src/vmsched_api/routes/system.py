"""Health, readiness and metrics: open to all (no token), outside /v1."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response, status
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from vmsched_api.deps import ServicesDep
from vmsched_api.fleet_metrics import refresh_fleet_gauges
from vmsched_runtime.logs import get_logger

router = APIRouter(tags=["system"])
log = get_logger(__name__)

# Seconds a scrape waits for the fleet's numbers before answering with the last ones.
FLEET_QUERY_TIMEOUT = 2.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep, response: Response) -> dict[str, str]:
    """Readiness: PostgreSQL, Redis and the broker each answer a question (503 otherwise, naming which
    and why). All are asked at once, each for 1.5 s at most, and the verdict is kept 1.5 s
    (:mod:`vmsched_runtime.readiness`): a server whose packets are dropped makes a probe wait no longer."""
    verdict = await services.readiness.verdict()
    if not verdict.ready:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return dict(verdict.checks)


@router.get("/metrics", include_in_schema=False)
async def metrics(services: ServicesDep) -> Response:
    """Prometheus: this process's metrics and the fleet's (hosts, capacity, allocation)."""
    try:
        await asyncio.wait_for(refresh_fleet_gauges(services.engine), timeout=FLEET_QUERY_TIMEOUT)
    except Exception as error:  # a scrape still answers, with the last fleet values, while PostgreSQL is away
        log.warning("fleet gauges not refreshed", error=repr(error))
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
