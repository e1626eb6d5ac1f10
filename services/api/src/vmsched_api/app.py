"""The API process: FastAPI for HTTP, a FastStream Rabbit broker for events, AsyncAPI docs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request, status
from fastapi.responses import JSONResponse
from faststream.rabbit import RabbitBroker
from faststream.specification import AsyncAPI
from faststream_fastapi import FastStreamAPI

from vmsched_amqp import events, topology
from vmsched_amqp.broker import declare_event_stream, declare_topology, make_broker, ready_messages
from vmsched_amqp.publishing import Publisher
from vmsched_amqp.readiness import broker_check
from vmsched_api.dashboard import add_dashboard
from vmsched_api.deps import Services
from vmsched_api.docs_pages import add_documentation
from vmsched_api.identity.audit import AuditLog, AuditMiddleware
from vmsched_api.identity.auth import authenticate, check_every_route_declares_a_scope
from vmsched_api.identity.authenticator import Authenticator
from vmsched_api.identity.cache import TokenCache
from vmsched_api.identity.rate_limit import RateLimiter
from vmsched_api.identity.store import TokenStore
from vmsched_api.project_store import ProjectStore
from vmsched_api.quota import QuotaExceeded
from vmsched_api.repository import Repository
from vmsched_api.routes import (
    audit,
    drains,
    event_stream,
    fences,
    hosts,
    projects,
    rebalance,
    reservations,
    server_groups,
    storage_pools,
    summary,
    system,
    tokens,
    vms,
    whatif,
)
from vmsched_api.routes import settings as settings_routes
from vmsched_api.server_outage import add_outage_answers
from vmsched_api.vm_acceptance import VmAcceptance
from vmsched_api.vm_deletes import VmDeletes
from vmsched_api.vm_intake import VmIntake
from vmsched_contract.api import ErrorDetail
from vmsched_pg.engine import create_engine, database_check
from vmsched_pg.outbox import published_marks, republish_unpublished
from vmsched_pg.schema_upgrade import upgrade_schema
from vmsched_redis.connections import connect_redis, redis_check
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.heap import freeze_startup_objects
from vmsched_runtime.logs import get_logger
from vmsched_runtime.readiness import Readiness
from vmsched_runtime.settings import Settings
from vmsched_runtime.telemetry import instrument_fastapi

log = get_logger("vmsched_api")

API_VERSION = "0.1.0"

DESCRIPTION = """vmsched places virtual machines on hypervisor hosts.

`POST /v1/vms` accepts a VM (202, status `pending`); a scheduler places it within milliseconds
(`scheduled`, with `hypervisor_id`), the host's agent creates it (`running`). Events for
subscribers are described in the AsyncAPI document at `/asyncapi`.

Every `/v1` route needs `Authorization: Bearer <token>` (401 without a live token) with the scope
the route names (403 without it): `vms:read`, `vms:write`, `hosts:read`, `hosts:admin`, `admin`.
A token sees and changes only its own project's VMs and server groups. See docs/security.md.
"""

V1 = "/v1"
# What any /v1 route may answer besides its own outcomes.
V1_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorDetail, "description": "the body could not be read (not UTF-8 JSON)"},
    401: {"model": ErrorDetail, "description": "no live token (see the WWW-Authenticate header)"},
    403: {"model": ErrorDetail, "description": "the token lacks the scope this route needs"},
    413: {"description": "the request body is larger than VMSCHED_MAX_BODY_BYTES", "content": {"text/plain": {}}},
    429: {"model": ErrorDetail, "description": "the token's request rate is spent (see the Retry-After header)"},
    503: {
        "model": ErrorDetail,
        "description": "a server vmsched needs did not answer, or the broker takes no messages (see Retry-After)",
    },
}


async def refuse_past_quota(_: Request, exceeded: Exception) -> JSONResponse:
    assert isinstance(exceeded, QuotaExceeded)
    return JSONResponse(exceeded.answer(), status_code=status.HTTP_403_FORBIDDEN)


def v1_router() -> APIRouter:
    """Every /v1 route: authenticated by the router itself, each naming its scope."""
    v1 = APIRouter(prefix=V1, dependencies=[Depends(authenticate)], responses=V1_RESPONSES)
    for feature in (
        vms,
        hosts,
        drains,
        fences,
        summary,
        server_groups,
        settings_routes,
        projects,
        tokens,
        audit,
        reservations,
        whatif,
        rebalance,
        event_stream,
        storage_pools,
    ):
        v1.include_router(feature.router)
    return v1


async def sweep_unpublished(services: Services) -> None:
    """Publish again what a crash or a broker outage left unpublished (the outbox sweeper)."""
    period = services.settings.republish_after
    while True:
        await asyncio.sleep(period)
        try:
            # A pending VM's vm.create may simply wait behind a backlog: send copies only once the
            # schedulers have drained their queue (see ready_messages).
            backlog = await ready_messages(services.broker, topology.SCHEDULER_QUEUE)
            await republish_unpublished(
                services.publisher,
                services.engine,
                older_than=period,
                stale_after=services.settings.resend_stale_after,
                resend_stale=not backlog,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # next period retries
            log.warning("republish sweep failed", error=repr(error))


def build_app(settings: Settings, *, migrate: bool = True, services: Services | None = None) -> FastStreamAPI:
    """The API: FastAPI routes and the broker that publishes. Given ``services`` (fakes, in tests),
    the routes use them from the start and the lifespan connects to nothing."""
    broker: RabbitBroker = make_broker(settings, prefetch=32)
    publisher = Publisher(broker)
    # Every event, for the AsyncAPI document subscribers read (the API publishes vm.create, vm.deleted
    # and delete commands; the other services the rest).
    events.declare_all(broker)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        if services is not None:
            yield {}
            return
        if migrate:
            await upgrade_schema(settings.sqlalchemy_url)
        engine = create_engine(settings.sqlalchemy_url, pool_size=settings.db_pool_size or 10)
        redis = connect_redis(settings)
        token_store = TokenStore(engine)
        token_cache = TokenCache()
        marks = published_marks(engine)
        live = Services(
            settings=settings,
            engine=engine,
            repository=Repository(engine),
            snapshot=Snapshot(redis, settings.redis_key_prefix),
            broker=broker,
            publisher=publisher,
            published=marks,
            intake=VmIntake(VmAcceptance(engine), publisher, marks),
            deletes=VmDeletes(engine),
            authenticator=Authenticator(bootstrap=settings.bootstrap_token, store=token_store, cache=token_cache),
            rate_limiter=RateLimiter(settings.rate_limit, settings.rate_burst),
            audit=AuditLog(engine),
            tokens=token_store,
            projects=ProjectStore(engine),
            # The same checks, asked the same way, as every other service's /readyz.
            readiness=Readiness(
                {"database": database_check(engine), "redis": redis_check(redis), "broker": broker_check(broker)}
            ),
        )
        app.state.services = live
        sweeper = asyncio.create_task(sweep_unpublished(live))
        listener = asyncio.create_task(token_cache.listen_forever(settings.sqlalchemy_url))
        freeze_startup_objects()
        try:
            yield {}
        finally:
            for task in (sweeper, listener):
                task.cancel()
            await asyncio.gather(sweeper, listener, return_exceptions=True)
            await live.intake.drain()
            await live.deletes.drain()
            await live.audit.drain()
            await live.published.drain()
            await redis.aclose()
            await engine.dispose()

    application = FastAPI(
        title="vmsched",
        version=API_VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        # 413 for a larger body: by its Content-Length, or as soon as a streamed one grows past it.
        max_body_size=settings.max_body_bytes,
    )
    if services is not None:
        application.state.services = services
    application.include_router(v1_router())
    application.add_exception_handler(QuotaExceeded, refuse_past_quota)
    add_outage_answers(application)
    application.include_router(system.router)
    check_every_route_declares_a_scope(application.routes)
    application.add_middleware(AuditMiddleware)
    instrument_fastapi(application)

    async def connect(connected: Any) -> None:
        await connected.start()
        await declare_topology(connected)
        await declare_event_stream(connected)

    streams = FastStreamAPI(
        broker,
        application=application,
        specification=specification(),
        # No FastStream pages: they load scripts from CDNs and add POST /asyncapi/try (docs_pages).
        asyncapi_path=None,
        connection_hook=connect,
    )
    add_documentation(application, streams.schema)
    add_dashboard(application)
    return streams


def specification() -> AsyncAPI:
    """The event contract's AsyncAPI document; the app adds its broker (declared with every event)."""
    return AsyncAPI(title=events.TITLE, version=API_VERSION, description=events.DESCRIPTION)
