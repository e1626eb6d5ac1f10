"""``vmsched-gateway``: relay assignments to agents, fold heartbeats and VM status back; and
``vmsched-gateway enroll-agent HOST_ID...``, which gives hosts their broker users."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
import uvloop

from vmsched_amqp.agent_identity import AgentCredentials
from vmsched_amqp.nodes import BROKER
from vmsched_pg.engine import DATABASE
from vmsched_redis.connections import REDIS
from vmsched_runtime.logs import configure_logging
from vmsched_runtime.service_cli import fail, service_main
from vmsched_runtime.settings import Settings, load_settings
from vmsched_runtime.telemetry import setup_tracing

SERVICE = "vmsched-gateway"


def serve(settings: Settings) -> None:
    from vmsched_gateway.bootstrap import build_app

    configure_logging("gateway", settings.log_level, settings.log_format)
    setup_tracing("gateway", settings)
    # uvloop: the same asyncio API, a faster loop (uvicorn picks it for the API too).
    uvloop.run(build_app(settings).run())


async def _enroll(settings: Settings, host_ids: list[str]) -> list[AgentCredentials]:
    from vmsched_gateway.enrollment import BrokerAdmin

    async with BrokerAdmin.of(settings) as admin:
        return [await admin.enroll(host_id) for host_id in host_ids]


def enroll_agent(
    host_id: Annotated[list[str], typer.Argument(help="the hosts to enroll", show_default=False)],
) -> None:
    """Give each host a broker user of its own (or a new password: the old one stops working for new
    connections), allowed to consume only agent.<HOST_ID> and to publish only its heartbeats and VM
    reports. Prints one JSON line per host: {"host_id", "username", "password", "amqp_url"}; hand
    it to the host's agent (docs/agent-sdk.md). Uses RabbitMQ's management API
    (VMSCHED_AMQP_ADMIN_URL)."""
    from vmsched_amqp.agent_identity import agent_username
    from vmsched_gateway.enrollment import EnrollmentError

    settings = load_settings(SERVICE)
    for one in host_id:
        try:
            agent_username(one, "/")
        except ValueError as error:
            fail(SERVICE, f"{error} (letters, digits, '_', '.', '-'; starting with a letter or digit)", code=2)
    try:
        enrolled = asyncio.run(_enroll(settings, host_id))
    except EnrollmentError as error:
        fail(SERVICE, str(error))
    for credentials in enrolled:
        print(credentials.model_dump_json(), flush=True)


main = service_main(
    SERVICE,
    "Relay each placed VM's create command to its host's queue, fold agents' heartbeats and VM status into "
    "Redis and PostgreSQL, and notice hosts that fall silent. Run without a command, it serves.",
    serve,
    needs=(BROKER, REDIS, DATABASE),
    commands=[enroll_agent],
)

if __name__ == "__main__":
    main()
