"""Simulated fleets whose hosts are enrolled agents: each its own broker user, as the gateway's
default VMSCHED_AGENT_AUTH=required wants (docs/security.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.servers import Servers
from vmsched_agent.hosts import HostSpec
from vmsched_agent.simulator import SimulatedFleet
from vmsched_amqp.agent_identity import AgentCredentials
from vmsched_gateway.enrollment import BrokerAdmin
from vmsched_runtime.settings import Settings

# Enrollments at once: each is four calls to the management API.
CONCURRENT_ENROLLMENTS = 8


async def enroll(servers: Servers, host_ids: Iterable[str]) -> dict[str, AgentCredentials]:
    """What ``vmsched-gateway enroll-agent`` gives each of ``host_ids`` on this run's broker."""
    limit = asyncio.Semaphore(CONCURRENT_ENROLLMENTS)
    async with BrokerAdmin.of(Settings.from_environment(servers.env())) as admin:

        async def one(host_id: str) -> AgentCredentials:
            async with limit:
                return await admin.enroll(host_id)

        enrolled = await asyncio.gather(*(one(host_id) for host_id in host_ids))
    return {credentials.host_id: credentials for credentials in enrolled}


def credentials_file(servers: Servers, host_ids: Sequence[str], path: Path) -> Path:
    """What ``vmsched-gateway enroll-agent`` would print for ``host_ids`` (one JSON line each), in
    ``path`` (its owner's alone), for ``vmsched-agent simulate --credentials``: enrolled here, without
    starting a gateway process for it (the command itself has its tests in test_agent_identity.py)."""
    enrolled = asyncio.run(enroll(servers, host_ids))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text("".join(enrolled[host_id].model_dump_json() + "\n" for host_id in host_ids))
    return path


async def enrolled_fleet(servers: Servers, hosts: Sequence[HostSpec], **options: Any) -> SimulatedFleet:
    """A :class:`SimulatedFleet` of ``hosts``, each connected as its own freshly enrolled broker user."""
    credentials = await enroll(servers, [host.id for host in hosts])
    return SimulatedFleet(hosts, credentials={host_id: c.amqp_url for host_id, c in credentials.items()}, **options)
