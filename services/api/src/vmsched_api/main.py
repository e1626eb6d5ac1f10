"""``vmsched-api``: upgrade the schema, then serve the HTTP API."""

from __future__ import annotations

import uvicorn

from vmsched_api.app import build_app
from vmsched_common.logs import configure_logging
from vmsched_common.settings import load_settings
from vmsched_common.telemetry import setup_tracing


def main() -> None:
    settings = load_settings("vmsched-api")
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


if __name__ == "__main__":
    main()
