"""Health, readiness and metrics: open to all (no token), outside /v1."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

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
    """Readiness: PostgreSQL, Redis and the broker all answer (503 otherwise, naming which)."""
    checks: dict[str, str] = {}

    async def check(name: str, probe: Awaitable[object]) -> None:
        try:
            answered = await asyncio.wait_for(probe, timeout=2.0)
            checks[name] = "ok" if answered is not False else "unreachable"
        except Exception as error:
            checks[name] = f"unreachable: {type(error).__name__}"

    await check("database", services.repository.ping())
    await check("redis", services.snapshot.redis.ping())
    # A round trip, not the connection's own idea of itself (which a silent partition does not change).
    await check("broker", services.publisher.answers(timeout=2.0))
    if any(value != "ok" for value in checks.values()):
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return checks


@router.get("/metrics", include_in_schema=False)
async def metrics(services: ServicesDep) -> Response:
    """Prometheus: this process's metrics and the fleet's (hosts, capacity, allocation)."""
    try:
        await asyncio.wait_for(refresh_fleet_gauges(services.engine), timeout=FLEET_QUERY_TIMEOUT)
    except Exception as error:  # a scrape still answers, with the last fleet values, while PostgreSQL is away
        log.warning("fleet gauges not refreshed", error=repr(error))
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
