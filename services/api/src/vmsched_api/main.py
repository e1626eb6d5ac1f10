"""``vmsched-api``: upgrade the schema, then serve the HTTP API."""

from __future__ import annotations

import uvicorn

from vmsched_amqp.nodes import BROKER
from vmsched_api.token_cli import create_token
from vmsched_pg.engine import DATABASE_SERVER
from vmsched_redis.connections import REDIS
from vmsched_runtime.logs import configure_logging
from vmsched_runtime.service_cli import service_main
from vmsched_runtime.settings import Settings
from vmsched_runtime.telemetry import setup_tracing

SERVICE = "vmsched-api"


def serve(settings: Settings) -> None:
    from vmsched_api.app import build_app

    configure_logging("api", settings.log_level, settings.log_format)
    setup_tracing("api", settings)
    uvicorn.run(
        build_app(settings),
        host=settings.api_host,
        port=settings.api_port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=15,
    )


main = service_main(
    SERVICE,
    "Serve the HTTP API (VMs, hosts, settings; OpenAPI docs at /docs, AsyncAPI at /asyncapi). Creates the "
    "database if it is missing and upgrades its schema first.",
    serve,
    needs=(BROKER, REDIS, DATABASE_SERVER),
    commands=[create_token],
)

if __name__ == "__main__":
    main()
