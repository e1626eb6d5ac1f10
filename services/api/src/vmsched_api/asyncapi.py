"""The AsyncAPI document of the events, as the API serves it: ``python -m vmsched_api.asyncapi``
prints it, ``make asyncapi`` writes it to docs/asyncapi.json (a test keeps the two equal)."""

from __future__ import annotations

import json
import sys

from vmsched_api.app import build_app
from vmsched_runtime.settings import Settings

# The committed document names the default broker, whatever VMSCHED_AMQP_URL the generating shell has; a
# running API serves its own broker's address instead (without credentials).
DOCUMENTED_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


def document() -> str:
    """The document as stable JSON (sorted keys: the channel order FastStream yields may vary)."""
    app = build_app(Settings(amqp_url=DOCUMENTED_AMQP_URL), migrate=False)
    return json.dumps(app.schema.to_specification().to_jsonable(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    sys.stdout.write(document())


if __name__ == "__main__":
    main()
