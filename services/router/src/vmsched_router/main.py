"""``vmsched-router``: serve the cell router in front of the cells of ``VMSCHED_ROUTER_CELLS``."""

from __future__ import annotations

import uvicorn

from vmsched_runtime.logs import configure_logging
from vmsched_runtime.service_cli import fail, service_main
from vmsched_runtime.settings import Settings
from vmsched_runtime.telemetry import setup_tracing

SERVICE = "vmsched-router"


def serve(settings: Settings) -> None:
    from vmsched_router.app import build_app

    if not settings.router_cells:
        fail(SERVICE, "VMSCHED_ROUTER_CELLS names no cell (a JSON list of {name, url, token})", 2)
    configure_logging("router", settings.log_level, settings.log_format)
    setup_tracing("router", settings)
    uvicorn.run(
        build_app(settings),
        host=settings.router_host,
        port=settings.router_port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=15,
    )


main = service_main(
    SERVICE,
    "Serve the cell router: one vmsched API in front of several cells (docs/scaling.md). Creates its own "
    "route database (VMSCHED_ROUTER_DATABASE_URL) if it is missing.",
    serve,
    # It talks to no broker, Redis or cell database: only to the cells' APIs and its own database.
    needs=(),
)

if __name__ == "__main__":
    main()
