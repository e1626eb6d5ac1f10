"""``vmsched-gateway``: relay assignments to agents, fold heartbeats and VM status back."""

from __future__ import annotations

import uvloop

from vmsched_common.logs import configure_logging
from vmsched_common.settings import load_settings
from vmsched_common.telemetry import setup_tracing
from vmsched_gateway.app import build_app


def main() -> None:
    settings = load_settings("vmsched-gateway")
    configure_logging("gateway", settings.log_level, settings.log_format)
    setup_tracing("gateway", settings)
    # uvloop: the same asyncio API, a faster loop (uvicorn picks it for the API too).
    uvloop.run(build_app(settings).run())


if __name__ == "__main__":
    main()
