"""``vmsched-scheduler``: run one stateless scheduler replica (run as many as you like)."""

from __future__ import annotations

import uvloop

from vmsched_common.logs import configure_logging
from vmsched_common.settings import load_settings
from vmsched_common.telemetry import setup_tracing
from vmsched_scheduler.app import build_app


def main() -> None:
    settings = load_settings("vmsched-scheduler")
    configure_logging("scheduler", settings.log_level, settings.log_format)
    setup_tracing("scheduler", settings)
    # uvloop: the same asyncio API, a faster loop (uvicorn picks it for the API too).
    uvloop.run(build_app(settings).app.run())


if __name__ == "__main__":
    main()
