"""A small fleet of the suite's own on the shared stack, for the client library and the CLI: two
simulated hosts (an agent process, enrolled), labelled so that only this suite's VMs land there."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.stack import Service, Stack, wait_for
from tests.fleets import credentials_file
from tests.servers import Servers
from vmsched_client import Client
from vmsched_contract.api import VmRequest


@dataclass(frozen=True)
class Fleet:
    suite: str  # the label value (suite=...) of its hosts, and the prefix of their ids
    hosts: list[str]
    agents: Service

    @property
    def selector(self) -> dict[str, str]:
        """The labels a VM asks for to land on this fleet only."""
        return {"suite": self.suite}


@pytest.fixture(scope="package")
def fleet(stack: Stack, servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    suite = f"client-{uuid.uuid4().hex[:6]}"
    hosts = [f"{suite}-0001", f"{suite}-0002"]
    credentials = credentials_file(servers, hosts, Path(tmp_path_factory.mktemp("credentials")) / "agents.jsonl")
    agents = stack.start_agents(
        f"agents-{suite}",
        *("--count", "2", "--prefix", suite, "--credentials", str(credentials), "--labels", f"suite={suite}"),
        *("--cpu", "8", "--memory-mb", "16384", "--disk-gb", "200", "--heartbeat-interval", "1"),
    )
    with Client(stack.api_url, stack.token) as client:

        def online() -> bool:
            agents.check_alive()
            return {h.id for h in client.list_hosts() if h.status.value == "online"} >= set(hosts)

        wait_for(online, 60, "the suite's hosts online", interval=0.2)
    try:
        yield Fleet(suite=suite, hosts=hosts, agents=agents)
    finally:
        agents.stop()


@pytest.fixture
def client(stack: Stack) -> Iterator[Client]:
    with Client(stack.api_url, stack.token, timeout=30) as admin:
        yield admin


def small(name: str, fleet: Fleet, **more: object) -> VmRequest:
    """A VM of the least size, for the suite's hosts only."""
    return VmRequest.model_validate(
        {"name": name, "cpu": 1, "memory_mb": 256, "disk_gb": 1, "labels": fleet.selector, **more}
    )
