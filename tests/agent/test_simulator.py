"""``SimulatedFleet`` on the real broker, with the test playing the gateway."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.agent.standin import StandInGateway
from tests.servers import Servers
from vmsched_agent import AgentQueueMissing, SimulatedFleet, generate_hosts
from vmsched_contract.messages import AgentCommand, CommandAction, ReportedStatus, Resources

CAPACITY = Resources(cpu=4, memory_mb=8192, disk_gb=100)


def create(cpu: int = 1) -> AgentCommand:
    resources = Resources(cpu=cpu, memory_mb=1024, disk_gb=10)
    return AgentCommand(action=CommandAction.CREATE, vm_id=uuid.uuid4(), name="vm", resources=resources)


def fleet(servers: Servers, count: int, **options: object) -> SimulatedFleet:
    hosts = generate_hosts(count, prefix=f"sim{uuid.uuid4().hex[:6]}", capacity=CAPACITY, zones=2)
    return SimulatedFleet(hosts, amqp_url=servers.amqp_url, heartbeat_interval=0.5, **options)  # type: ignore[arg-type]


async def test_each_host_receives_the_commands_sent_to_it(servers: Servers, gateway: StandInGateway) -> None:
    async with fleet(servers, 6) as simulated:
        hosts = list(simulated.agents)
        sent = {hosts[1]: create(), hosts[4]: create()}
        for host_id, command in sent.items():
            await gateway.send(host_id, command)

        for host_id, command in sent.items():
            reported_by, report = await asyncio.wait_for(simulated.wait_for_report(command.vm_id), 5)
            assert (reported_by, report.status) == (host_id, ReportedStatus.RUNNING)
            assert simulated.received(host_id) == [command]
            assert simulated.host_of(command.vm_id) == host_id
            await gateway.status(command.vm_id, ReportedStatus.RUNNING)  # and the gateway heard it

        assert simulated.startup_seconds is not None
        assert sum(counts[CommandAction.CREATE] for counts in simulated.commands_received.values()) == 2
        assert simulated.received(hosts[0]) == []
        beat = await gateway.heartbeat(hosts[1], lambda b: sent[hosts[1]].vm_id in b.vm_ids)
        assert beat.labels == {"zone": "z2"}


async def test_a_host_without_room_reports_failed_with_the_numbers(servers: Servers, gateway: StandInGateway) -> None:
    async with fleet(servers, 1) as simulated:
        (host_id,) = simulated.agents
        fits, too_big = create(cpu=3), create(cpu=2)
        await gateway.send(host_id, fits)
        await gateway.status(fits.vm_id, ReportedStatus.RUNNING)
        await gateway.send(host_id, too_big)

        failed = await gateway.status(too_big.vm_id, ReportedStatus.FAILED)

    assert failed.report.message == f"no room on {host_id}: cpu: needs 2, 1 free (4 total, 3 allocated)"


async def test_with_fail_rate_one_every_create_fails(servers: Servers, gateway: StandInGateway) -> None:
    async with fleet(servers, 2, fail_rate=1.0) as simulated:
        host_id = next(iter(simulated.agents))
        command = create()
        await gateway.send(host_id, command)

        failed = await gateway.status(command.vm_id, ReportedStatus.FAILED)

    assert failed.report.message == "simulated failure (fail rate 1)"
    assert simulated.host_of(command.vm_id) is None


async def test_a_fleet_nobody_declares_queues_for_gives_up_and_closes(
    servers: Servers, gateway: StandInGateway
) -> None:
    simulated = fleet(servers, 3, queue_wait_timeout=0.3)
    gateway.declare_queues = False
    try:
        with pytest.raises(AgentQueueMissing, match="3 of 3 hosts"):
            await simulated.start()
    finally:
        gateway.declare_queues = True
    assert not simulated.connected


async def test_receipts_say_when_each_command_was_taken_off_its_queue(
    servers: Servers, gateway: StandInGateway
) -> None:
    async with fleet(servers, 2, record_receipts=True) as simulated:
        host_id = list(simulated.agents)[1]
        command = create()
        sent_at = time.time()
        await gateway.send(host_id, command)
        await asyncio.wait_for(simulated.wait_for_report(command.vm_id), 5)

        (receipt,) = simulated.take_receipts()
        assert (receipt.vm_id, receipt.host_id, receipt.action) == (command.vm_id, host_id, CommandAction.CREATE)
        assert sent_at <= receipt.at <= time.time()
        assert simulated.take_receipts() == []  # taken once
