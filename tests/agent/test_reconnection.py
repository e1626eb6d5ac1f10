"""An agent's consumer is kept by its connection, not restored by aio-pika's reconnection
(vmsched_agent/connection.py): a queue RabbitMQ cannot declare after a reconnection (missing here;
on a cluster, one whose node is down) must not keep the connection, and the heartbeats on it, down."""

from __future__ import annotations

import uuid

import aio_pika

from tests.agent.conftest import MakeAgent, RecordingHypervisor
from tests.agent.standin import StandInGateway
from tests.integration.amqp_tools import drop_connection, queue_exists
from tests.servers import Servers
from vmsched_amqp import topology
from vmsched_contract.messages import AgentCommand, CommandAction, ReportedStatus, Resources


def create() -> AgentCommand:
    return AgentCommand(
        action=CommandAction.CREATE,
        vm_id=uuid.uuid4(),
        name="vm",
        resources=Resources(cpu=1, memory_mb=512, disk_gb=1),
    )


async def lose_queue(servers: Servers, gateway: StandInGateway, host_id: str) -> None:
    """Delete ``agent.<host_id>``; the stand-in gateway declares it again at the next heartbeat
    once ``gateway.declare_queues`` is set again."""
    gateway.declare_queues = False
    for _ in range(2):  # heartbeats being handled when the flag changed (they may declare) are done
        await gateway.heartbeat(host_id, after=len(gateway.heartbeats))
    gateway.declared.discard(host_id)
    connection = await aio_pika.connect(servers.amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(topology.agent_queue_name(host_id))


async def test_a_reconnection_while_the_queue_is_missing_keeps_heartbeats_flowing_and_commands_resume_once_it_is_back(
    make_agent: MakeAgent, gateway: StandInGateway, servers: Servers, host_id: str
) -> None:
    hypervisor = RecordingHypervisor()
    agent = make_agent(host_id, hypervisor)
    await agent.start()
    await lose_queue(servers, gateway, host_id)
    try:
        await drop_connection(await agent.connection.broker.connect())  # would not come back if it redeclared the queue

        await gateway.heartbeat(host_id, after=len(gateway.heartbeats))  # over the new connection
        assert not await queue_exists(servers.amqp_url, topology.agent_queue_name(host_id))
    finally:
        gateway.declare_queues = True
    await gateway.wait_for(lambda: host_id in gateway.declared or None)
    command = create()
    await gateway.send(host_id, command)
    await gateway.status(command.vm_id, ReportedStatus.RUNNING, within=15)
    assert hypervisor.created == [command]


async def test_a_consumer_the_broker_cancels_resumes_when_its_queue_is_back(
    make_agent: MakeAgent, gateway: StandInGateway, servers: Servers, host_id: str
) -> None:
    hypervisor = RecordingHypervisor()
    agent = make_agent(host_id, hypervisor)
    await agent.start()
    await lose_queue(servers, gateway, host_id)  # RabbitMQ cancels the agent's consumer
    gateway.declare_queues = True
    await gateway.wait_for(lambda: host_id in gateway.declared or None)
    command = create()
    await gateway.send(host_id, command)
    await gateway.status(command.vm_id, ReportedStatus.RUNNING, within=15)
    assert hypervisor.created == [command]
    assert agent.consuming
