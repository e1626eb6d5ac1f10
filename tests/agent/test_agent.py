"""The agent against the real broker, with the test playing the gateway."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import aio_pika
import pytest
from faststream.rabbit import RabbitBroker

from tests.agent.conftest import MakeAgent, RecordingHypervisor
from tests.agent.standin import StandInGateway
from vmsched_agent import AgentQueueMissing
from vmsched_amqp import topology
from vmsched_contract.messages import AgentCommand, CommandAction, HostStatus, ReportedStatus, Resources

SMALL = Resources(cpu=1, memory_mb=512, disk_gb=10)


def command(action: CommandAction, vm_id: uuid.UUID | None = None, attempt: int = 1) -> AgentCommand:
    return AgentCommand(action=action, vm_id=vm_id or uuid.uuid4(), name="vm", resources=SMALL, attempt=attempt)


async def test_agent_binds_once_the_gateway_declares_its_queue_and_reports_running(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    hypervisor = RecordingHypervisor()
    agent = make_agent(host_id, hypervisor)

    await agent.start()  # returns only once the queue the stand-in declared on the heartbeat is consumed
    assert host_id in gateway.declared
    create = command(CommandAction.CREATE)
    await gateway.send(host_id, create)

    received = await gateway.status(create.vm_id, ReportedStatus.RUNNING)
    assert received.report.agent_id == host_id
    assert received.report.attempt == 1
    assert received.message_id == f"{create.vm_id}:running:1"
    assert received.content_type == "application/json"
    assert received.persistent
    assert hypervisor.created == [create]
    assert agent.vm_ids == {create.vm_id}


async def test_a_repeated_create_reports_running_again_without_creating_twice(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    hypervisor = RecordingHypervisor()
    await make_agent(host_id, hypervisor).start()
    create = command(CommandAction.CREATE)

    await gateway.send(host_id, create)
    await gateway.status(create.vm_id, ReportedStatus.RUNNING)
    await gateway.send(host_id, create)
    again = await gateway.status(create.vm_id, ReportedStatus.RUNNING, count=2)

    assert again.report.message == "already running on this host"
    assert len(hypervisor.created) == 1


async def test_delete_reports_deleted_and_a_delete_for_an_unknown_vm_too(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    hypervisor = RecordingHypervisor()
    agent = make_agent(host_id, hypervisor)
    await agent.start()
    create = command(CommandAction.CREATE)
    await gateway.send(host_id, create)
    await gateway.status(create.vm_id, ReportedStatus.RUNNING)

    await gateway.send(host_id, command(CommandAction.DELETE, create.vm_id))
    deleted = await gateway.status(create.vm_id, ReportedStatus.DELETED)
    unknown = command(CommandAction.DELETE)
    await gateway.send(host_id, unknown)
    deleted_unknown = await gateway.status(unknown.vm_id, ReportedStatus.DELETED)

    assert deleted.message_id == f"{create.vm_id}:deleted:1"
    assert deleted_unknown.report.message == "not on this host"
    assert [c.vm_id for c in hypervisor.deleted] == [create.vm_id]  # the unknown VM was not asked for
    assert agent.vm_ids == frozenset()


async def test_a_hypervisor_error_is_reported_as_failed_with_its_message(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    hypervisor = RecordingHypervisor()
    hypervisor.fail_with = RuntimeError("libvirt: image not found")
    agent = make_agent(host_id, hypervisor)
    await agent.start()
    create = command(CommandAction.CREATE, attempt=2)

    await gateway.send(host_id, create)

    failed = await gateway.status(create.vm_id, ReportedStatus.FAILED)
    assert failed.report.message == "libvirt: image not found"
    assert failed.report.attempt == 2
    assert failed.message_id == f"{create.vm_id}:failed:2"
    assert agent.vm_ids == frozenset()


async def test_an_undecodable_command_is_dead_lettered_with_the_reason_and_the_next_one_works(
    make_agent: MakeAgent, gateway: StandInGateway, broker: RabbitBroker, host_id: str
) -> None:
    agent = make_agent(host_id)
    await agent.start()
    garbage_id = f"garbage-{uuid.uuid4().hex}"

    await gateway.send_raw(host_id, b'{"action": "create", "vm_id": "not-a-uuid', garbage_id)
    create = command(CommandAction.CREATE)
    await gateway.send(host_id, create)

    await gateway.status(create.vm_id, ReportedStatus.RUNNING)
    dead = await take_dead_letter(broker, garbage_id)
    assert str(dead.headers[topology.DEAD_LETTER_REASON_HEADER]).startswith("invalid message: body: Invalid JSON")
    assert dead.headers[topology.DEAD_LETTER_QUEUE_HEADER] == topology.agent_queue_name(host_id)
    assert dead.routing_key == host_id
    assert agent.stats.dead_lettered == 1


async def take_dead_letter(broker: RabbitBroker, message_id: str) -> aio_pika.abc.AbstractIncomingMessage:
    """Find (and remove) ``message_id`` in ``vmsched.dead-letters``; every other message goes back."""
    connection = await broker.connect()
    channel = await connection.channel()
    try:
        queue = await channel.declare_queue(topology.DEAD_LETTER_QUEUE.name, passive=True)
        async with asyncio.timeout(5):
            while True:
                held = []
                found = None
                while (message := await queue.get(fail=False, no_ack=False)) is not None:
                    if message.message_id == message_id:
                        found = message
                        break
                    held.append(message)
                for other in held:
                    await other.nack(requeue=True)
                if found is not None:
                    await found.ack()
                    return found
                await asyncio.sleep(0.05)  # not there yet: look again
    finally:
        await channel.close()


async def test_heartbeats_carry_the_vms_the_host_runs(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    agent = make_agent(host_id)
    await agent.start()
    create = command(CommandAction.CREATE)

    await gateway.send(host_id, create)
    await gateway.status(create.vm_id, ReportedStatus.RUNNING)

    beat = await gateway.heartbeat(host_id, lambda b: create.vm_id in b.vm_ids)
    assert beat.capacity == agent.capacity
    assert beat.status is HostStatus.ONLINE


async def test_draining_is_announced_at_once_and_on_stop(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    agent = make_agent(host_id, heartbeat_interval=600.0)  # no heartbeat comes by itself during the test
    await agent.start()

    mark = len(gateway.heartbeats)
    agent.set_draining(True)
    await gateway.heartbeat(host_id, lambda b: b.status is HostStatus.DRAINING, after=mark)
    mark = len(gateway.heartbeats)
    agent.set_draining(False)
    await gateway.heartbeat(host_id, lambda b: b.status is HostStatus.ONLINE, after=mark)
    mark = len(gateway.heartbeats)
    await agent.stop()

    last = await gateway.heartbeat(host_id, after=mark)
    assert last.status is HostStatus.DRAINING


async def test_start_gives_up_when_no_gateway_declares_the_queue(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    gateway.declare_queues = False
    try:
        agent = make_agent(host_id, queue_wait_timeout=0.5)
        with pytest.raises(AgentQueueMissing, match=f"agent.{host_id}"):
            await agent.start()
    finally:
        gateway.declare_queues = True
    assert not agent.consuming


async def test_a_command_still_running_when_the_agent_stops_is_delivered_again(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    class Stuck(RecordingHypervisor):
        def __init__(self) -> None:
            super().__init__()
            self.entered = asyncio.Event()

        async def create_vm(self, command: AgentCommand) -> None:
            self.entered.set()
            await asyncio.Event().wait()  # never finishes: the agent is stopped meanwhile

    stuck = Stuck()
    first = make_agent(host_id, stuck, graceful_timeout=0.1)
    await first.start()
    create = command(CommandAction.CREATE)
    await gateway.send(host_id, create)
    await asyncio.wait_for(stuck.entered.wait(), 5)

    await first.stop()  # the command was not acked: it goes back to the queue
    hypervisor = RecordingHypervisor()
    await make_agent(host_id, hypervisor).start()

    await gateway.status(create.vm_id, ReportedStatus.RUNNING)
    assert hypervisor.created == [create]
    assert gateway.reports_for(create.vm_id)[0].status is ReportedStatus.RUNNING  # no report from the first


async def test_stop_lets_a_command_in_flight_finish_and_report(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    class Slow(RecordingHypervisor):
        async def create_vm(self, command: AgentCommand) -> None:
            entered.set()
            await release.wait()
            await super().create_vm(command)

    agent = make_agent(host_id, Slow())
    await agent.start()
    create = command(CommandAction.CREATE)
    await gateway.send(host_id, create)
    await asyncio.wait_for(entered.wait(), 5)

    stopping = asyncio.create_task(agent.stop())
    await asyncio.sleep(0)  # stop() has begun: no new deliveries
    release.set()
    await stopping

    assert any(r.status is ReportedStatus.RUNNING for r in gateway.reports_for(create.vm_id))


async def test_run_serves_until_sigterm_then_stops_cleanly(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    agent = make_agent(host_id)
    running = asyncio.create_task(agent.run())
    await gateway.wait_for(lambda: True if agent.consuming else None)  # re-checked on each heartbeat
    mark = len(gateway.heartbeats)

    os.kill(os.getpid(), signal.SIGTERM)  # run() handles it while it serves
    await asyncio.wait_for(running, 5)

    assert not agent.consuming
    await gateway.heartbeat(host_id, lambda b: b.status is HostStatus.DRAINING, after=mark)
