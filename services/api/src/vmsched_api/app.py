"""The API process: FastAPI for HTTP, a FastStream Rabbit broker for events, AsyncAPI docs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from faststream.rabbit import RabbitBroker
from faststream.specification import AsyncAPI
from faststream_fastapi import FastStreamAPI

from vmsched_api.deps import Services
from vmsched_api.repository import Repository
from vmsched_api.routes import hosts, server_groups, system, vms
from vmsched_common import events, topology
from vmsched_common.amqp import declare_topology, make_broker, ready_messages
from vmsched_common.connections import connect_redis
from vmsched_common.db.engine import create_engine
from vmsched_common.db.migrate import upgrade_schema
from vmsched_common.heap import freeze_startup_objects
from vmsched_common.logs import get_logger
from vmsched_common.outbox import published_marks, republish_unpublished
from vmsched_common.publishing import Publisher
from vmsched_common.settings import Settings
from vmsched_common.snapshot import Snapshot
from vmsched_common.telemetry import instrument_fastapi

log = get_logger("vmsched_api")

API_VERSION = "0.1.0"

DESCRIPTION = """vmsched places virtual machines on hypervisor hosts.

`POST /v1/vms` accepts a VM (202, status `pending`); a scheduler places it within milliseconds
(`scheduled`, with `hypervisor_id`), the host's agent creates it (`running`). Events for
subscribers are described in the AsyncAPI document at `/asyncapi`.
"""


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
        live = Services(
            settings=settings,
            engine=engine,
            repository=Repository(engine),
            snapshot=Snapshot(redis, settings.redis_key_prefix),
            broker=broker,
            publisher=publisher,
            published=published_marks(engine),
        )
        app.state.services = live
        sweeper = asyncio.create_task(sweep_unpublished(live))
        freeze_startup_objects()
        try:
            yield {}
        finally:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)
            await live.published.drain()
            await redis.aclose()
            await engine.dispose()

    application = FastAPI(
        title="vmsched",
        version=API_VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url="/docs",
    )
    if services is not None:
        application.state.services = services
    application.include_router(vms.router)
    application.include_router(hosts.router)
    application.include_router(server_groups.router)
    application.include_router(system.router)
    instrument_fastapi(application)

    async def connect(connected: Any) -> None:
        await connected.start()
        await declare_topology(connected)

    return FastStreamAPI(
        broker,
        application=application,
        specification=specification(),
        asyncapi_path="/asyncapi",
        connection_hook=connect,
    )


def specification() -> AsyncAPI:
    """The event contract's AsyncAPI document; the app adds its broker (declared with every event)."""
    return AsyncAPI(title=events.TITLE, version=API_VERSION, description=events.DESCRIPTION)
