"""``vmsched-scheduler``: one stateless scheduler replica (run as many as you like)."""

from __future__ import annotations

import uvloop

from vmsched_amqp.nodes import BROKER
from vmsched_pg.engine import DATABASE
from vmsched_redis.connections import REDIS
from vmsched_runtime.logs import configure_logging
from vmsched_runtime.service_cli import service_main
from vmsched_runtime.settings import Settings
from vmsched_runtime.telemetry import setup_tracing

SERVICE = "vmsched-scheduler"


def serve(settings: Settings) -> None:
    from vmsched_scheduler.bootstrap import build_app

    configure_logging("scheduler", settings.log_level, settings.log_format)
    setup_tracing("scheduler", settings)
    # uvloop: the same asyncio API, a faster loop (uvicorn picks it for the API too).
    uvloop.run(build_app(settings).app.run())


main = service_main(
    SERVICE,
    "Place VMs: consume vm.create, choose hosts, claim their capacity in Redis, commit to PostgreSQL, "
    "emit vm.assigned. Stateless: run as many replicas as you like.",
    serve,
    needs=(BROKER, REDIS, DATABASE),
)

if __name__ == "__main__":
    main()
