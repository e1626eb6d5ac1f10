"""``vmsched-gateway``: relay assignments to agents, fold heartbeats and VM status back."""

from __future__ import annotations

import uvloop

from vmsched_common.logs import configure_logging
from vmsched_common.service_cli import service_main
from vmsched_common.settings import Settings
from vmsched_common.telemetry import setup_tracing

SERVICE = "vmsched-gateway"


def serve(settings: Settings) -> None:
    from vmsched_gateway.bootstrap import build_app

    configure_logging("gateway", settings.log_level, settings.log_format)
    setup_tracing("gateway", settings)
    # uvloop: the same asyncio API, a faster loop (uvicorn picks it for the API too).
    uvloop.run(build_app(settings).run())


main = service_main(
    SERVICE,
    "Relay each placed VM's create command to its host's queue, fold agents' heartbeats and VM status into "
    "Redis and PostgreSQL, and notice hosts that fall silent.",
    serve,
)

if __name__ == "__main__":
    main()
