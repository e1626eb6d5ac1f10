"""What an agent does with a command, without a broker: ``Agent.carry_out``."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from pydantic import ValidationError

from tests.agent.conftest import HOST, RecordingHypervisor
from vmsched_agent import Agent, Hypervisor
from vmsched_contract.messages import AgentCommand, CommandAction, ReportedStatus, Resources

NOWHERE = "amqp://guest:guest@127.0.0.1:1/"  # never connected: these agents are not started
SMALL = Resources(cpu=1, memory_mb=512, disk_gb=10)


def command(action: CommandAction, vm_id: uuid.UUID) -> AgentCommand:
    return AgentCommand(action=action, vm_id=vm_id, name="vm", resources=SMALL)


def agent(hypervisor: Hypervisor, **options: object) -> Agent:
    return Agent("host-1", HOST, hypervisor, amqp_url=NOWHERE, heartbeat_interval=1.0, **options)  # type: ignore[arg-type]


def test_the_recording_hypervisor_satisfies_the_protocol() -> None:
    assert isinstance(RecordingHypervisor(), Hypervisor)


def test_an_invalid_host_id_is_refused_when_the_agent_is_made() -> None:
    with pytest.raises(ValidationError, match="agent_id"):
        Agent("not a host id!", HOST, RecordingHypervisor(), amqp_url=NOWHERE)


def test_only_one_way_to_reach_the_broker_may_be_given() -> None:
    shared = agent(RecordingHypervisor()).connection
    with pytest.raises(ValueError, match="at most one"):
        Agent("host-1", HOST, RecordingHypervisor(), amqp_url=NOWHERE, connection=shared)


async def test_vms_the_host_already_runs_are_not_created_again() -> None:
    vm_id = uuid.uuid4()
    hypervisor = RecordingHypervisor()
    host = agent(hypervisor, vm_ids=[vm_id])

    report = await host.carry_out(command(CommandAction.CREATE, vm_id))

    assert report.status is ReportedStatus.RUNNING
    assert hypervisor.created == []
    assert host.heartbeat().vm_ids == [vm_id]


async def test_a_failed_delete_keeps_the_vm_and_says_so() -> None:
    vm_id = uuid.uuid4()
    hypervisor = RecordingHypervisor()
    host = agent(hypervisor, vm_ids=[vm_id])
    hypervisor.fail_with = OSError()

    report = await host.carry_out(command(CommandAction.DELETE, vm_id))

    assert report.status is ReportedStatus.FAILED
    assert report.message == "delete failed: OSError"  # an error without text is named by its type
    assert host.vm_ids == {vm_id}


async def test_commands_for_one_vm_run_one_after_the_other() -> None:
    vm_id = uuid.uuid4()
    release = asyncio.Event()

    class SlowCreate(RecordingHypervisor):
        async def create_vm(self, command: AgentCommand) -> None:
            await release.wait()
            await super().create_vm(command)

    hypervisor = SlowCreate()
    host = agent(hypervisor)
    creating = asyncio.create_task(host.carry_out(command(CommandAction.CREATE, vm_id)))
    deleting = asyncio.create_task(host.carry_out(command(CommandAction.DELETE, vm_id)))
    await asyncio.sleep(0.01)
    assert not deleting.done()  # waits for the create, rather than answering "not on this host"

    release.set()
    created, deleted = await asyncio.gather(creating, deleting)

    assert (created.status, deleted.status, deleted.message) == (ReportedStatus.RUNNING, ReportedStatus.DELETED, "")
    assert [c.vm_id for c in hypervisor.deleted] == [vm_id]
    assert host.vm_ids == frozenset()


async def test_commands_for_different_vms_run_side_by_side() -> None:
    both_in = asyncio.Barrier(2)

    class Meeting(RecordingHypervisor):
        async def create_vm(self, command: AgentCommand) -> None:
            await both_in.wait()  # only returns when the other create is in as well

    host = agent(Meeting())
    reports = await asyncio.wait_for(
        asyncio.gather(*(host.carry_out(command(CommandAction.CREATE, uuid.uuid4())) for _ in range(2))), 2
    )

    assert [r.status for r in reports] == [ReportedStatus.RUNNING] * 2
    assert host.stats.commands_received[CommandAction.CREATE] == 2
