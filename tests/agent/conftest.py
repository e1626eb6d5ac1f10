from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from faststream.rabbit import RabbitBroker

from tests.agent.standin import StandInGateway
from tests.servers import Servers
from vmsched_agent import Agent, Hypervisor
from vmsched_amqp.broker import declare_topology, make_broker
from vmsched_contract.messages import AgentCommand, Resources
from vmsched_runtime.settings import Settings

HOST = Resources(cpu=8, memory_mb=16384, disk_gb=100)


@pytest.fixture(scope="session")
async def broker(servers: Servers) -> AsyncIterator[RabbitBroker]:
    broker = make_broker(Settings(amqp_url=servers.amqp_url))
    await broker.connect()
    await declare_topology(broker)
    yield broker
    await broker.stop()


@pytest.fixture(scope="session")
async def gateway(broker: RabbitBroker) -> AsyncIterator[StandInGateway]:
    gateway = StandInGateway(broker)
    await gateway.start()
    yield gateway
    await gateway.stop()


@pytest.fixture
def host_id() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


class RecordingHypervisor:
    """Creates and deletes nothing; remembers what it was asked; fails when told to."""

    def __init__(self) -> None:
        self.created: list[AgentCommand] = []
        self.deleted: list[AgentCommand] = []
        self.fail_with: Exception | None = None

    async def create_vm(self, command: AgentCommand) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.created.append(command)

    async def delete_vm(self, command: AgentCommand) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.deleted.append(command)


MakeAgent = Callable[..., Agent]


@pytest.fixture
async def make_agent(servers: Servers, gateway: StandInGateway) -> AsyncIterator[MakeAgent]:
    """Agents on the test broker with quick heartbeats; all stopped at the end of the test."""
    agents: list[Agent] = []

    def make(agent_id: str, hypervisor: Hypervisor | None = None, **options: Any) -> Agent:
        options.setdefault("amqp_url", servers.amqp_url)
        options.setdefault("heartbeat_interval", 0.2)
        options.setdefault("queue_wait_timeout", 10.0)
        agent = Agent(agent_id, HOST, hypervisor or RecordingHypervisor(), **options)
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        await agent.stop()
