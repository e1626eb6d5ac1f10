"""The libvirt agent against libvirt's own test driver: a real libvirt connection to an in-memory
hypervisor, no daemon.

How the test driver keeps its state (libvirt 9): ``test:///default`` is one host per process,
shared by every connection open on it, and reset to its start (one running domain named ``test``,
the pool ``default-pool``, the network ``default``; 16 CPUs, 3,072 MiB) once the last of them
closes. A ``test:///<path>`` node file (node.xml here) is a new, empty host for each connection
opened. So a test that restarts the agent on one host uses ``test:///default`` and holds a
connection of its own open throughout (the :func:`host` fixture: the host's libvirtd, which outlives
the agent); one that needs two hosts (migration) uses two node files and the very connections the
agents hold.

libvirt-python is imported here, unguarded: without it these tests fail; they never skip.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import libvirt  # noqa: F401  # the tests need it: an ImportError here fails them (CI installs it)
import pytest

from tests.agent.standin import StandInGateway
from tests.servers import Servers
from vmsched_agent.libvirt.host import VirtHost, open_host
from vmsched_agent.libvirt.ports import LibvirtHost
from vmsched_agent.libvirt.runner import LibvirtAgent
from vmsched_agent.libvirt.settings import LibvirtAgentSettings
from vmsched_contract.messages import AgentCommand, CommandAction, Resources

DEFAULT_URI = "test:///default"
NODE_FILE = Path(__file__).with_name("node.xml")
SMALL = Resources(cpu=2, memory_mb=512, disk_gb=10)


def command(
    action: CommandAction, vm_id: uuid.UUID | None = None, resources: Resources = SMALL, **fields: Any
) -> AgentCommand:
    return AgentCommand(action=action, vm_id=vm_id or uuid.uuid4(), name="web-1", resources=resources, **fields)


@pytest.fixture
def host() -> Iterator[VirtHost]:
    """``test:///default`` as long as the test runs (what its agents connect to lives as long)."""
    connection = VirtHost.open(DEFAULT_URI)
    yield connection
    connection.close()


@pytest.fixture
def node_uri(tmp_path: Path) -> Callable[[str], str]:
    """``test:///`` URIs of hosts of our own (node.xml), one per name: each connection opened on one
    is a new, empty host."""

    def uri(name: str) -> str:
        path = tmp_path / f"{name}.xml"
        if not path.exists():
            shutil.copy(NODE_FILE, path)
        return f"test://{path}"

    return uri


def settings_for(uri: str, host_id: str, **overrides: Any) -> LibvirtAgentSettings:
    """Quick timings: usage sampled, the connection checked and reopened within a fraction of a second."""
    values: dict[str, Any] = {
        "uri": uri,
        "host_id": host_id,
        "pool": "default-pool" if uri == DEFAULT_URI else "vmsched",
        "usage_interval": 0.2,
        "check_interval": 0.2,
        "reconnect_max_delay": 0.4,
        "shutdown_timeout": 2.0,
        "start_timeout": 5.0,
    }
    return LibvirtAgentSettings(**{**values, **overrides})


class RecordingOpener:
    """Opens real libvirt connections and keeps them, so a test can cut one (as a daemon restart
    would); refuses to open while ``refuse`` says why."""

    def __init__(self) -> None:
        self.opened: list[LibvirtHost] = []
        self.refuse: str | None = None

    def __call__(self, uri: str) -> LibvirtHost:
        from vmsched_agent.libvirt.ports import HostError

        if self.refuse is not None:
            raise HostError(self.refuse, connection_lost=True)
        opened = open_host(uri)
        self.opened.append(opened)
        return opened


MakeLibvirtAgent = Callable[..., LibvirtAgent]


@pytest.fixture
async def make_libvirt_agent(servers: Servers, gateway: StandInGateway) -> AsyncIterator[MakeLibvirtAgent]:
    """Libvirt agents on the test broker (the stand-in gateway declares their queues), quick
    heartbeats; all stopped at the end of the test."""
    made: list[LibvirtAgent] = []

    def make(settings: LibvirtAgentSettings, **options: Any) -> LibvirtAgent:
        options.setdefault("amqp_url", servers.amqp_url)
        options.setdefault("heartbeat_interval", 0.2)
        options.setdefault("queue_wait_timeout", 10.0)
        agent = LibvirtAgent(settings, **options)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        await agent.stop()
