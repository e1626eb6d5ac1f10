"""An agent's migration and power commands, without a broker: the capabilities it declares, each
step carried out once, what its heartbeats list along the way, and refusals when it cannot."""

from __future__ import annotations

import uuid

from tests.agent.conftest import HOST, RecordingHypervisor
from vmsched_agent import Agent, FakeHypervisor, Hypervisor
from vmsched_agent.hosts import HostSpec
from vmsched_contract.messages import AgentCommand, CommandAction, MigrationOrder, ReportedStatus, Resources

NOWHERE = "amqp://guest:guest@127.0.0.1:1/"  # never connected: these agents are not started
SMALL = Resources(cpu=1, memory_mb=512, disk_gb=10)
ORDER = MigrationOrder(number=3, source="src-1", target="dst-1")


def command(action: CommandAction, vm_id: uuid.UUID) -> AgentCommand:
    migration = None if action in (CommandAction.STOP, CommandAction.START) else ORDER
    return AgentCommand(action=action, vm_id=vm_id, name="vm", resources=SMALL, migration=migration)


def fake(host_id: str, **options: object) -> FakeHypervisor:
    return FakeHypervisor(HostSpec(id=host_id, capacity=HOST), **options)  # type: ignore[arg-type]


def agent(host_id: str, hypervisor: Hypervisor, **options: object) -> Agent:
    return Agent(host_id, HOST, hypervisor, amqp_url=NOWHERE, heartbeat_interval=1.0, **options)  # type: ignore[arg-type]


def test_the_capabilities_declared_are_what_the_hypervisor_implements_unless_given() -> None:
    assert agent("host-1", RecordingHypervisor()).heartbeat().capabilities == []
    assert agent("host-1", fake("host-1")).heartbeat().capabilities == ["migrate", "power"]
    assert agent("host-1", fake("host-1"), capabilities=["power"]).heartbeat().capabilities == ["power"]


async def test_a_migration_moves_the_vm_from_the_source_s_heartbeats_to_the_target_s() -> None:
    vm_id = uuid.uuid4()
    source_hv, target_hv = fake("src-1"), fake("dst-1")
    source, target = agent("src-1", source_hv, vm_ids=[vm_id]), agent("dst-1", target_hv)
    await source_hv.create_vm(command(CommandAction.CREATE, vm_id))

    prepared = await target.carry_out(command(CommandAction.PREPARE_MIGRATION, vm_id))
    assert (prepared.status, prepared.action, prepared.migration) == (
        ReportedStatus.PREPARED,
        CommandAction.PREPARE_MIGRATION,
        3,
    )
    assert vm_id in target_hv.vms  # the target holds its resources from here
    assert target.heartbeat().vm_ids == []  # but does not run it yet
    handed = await source.carry_out(command(CommandAction.MIGRATE, vm_id))
    assert handed.status is ReportedStatus.HANDED_OVER
    assert source.heartbeat().vm_ids == []  # handed over: no longer listed
    again = await source.carry_out(command(CommandAction.MIGRATE, vm_id))
    assert (again.status, again.message) == (ReportedStatus.HANDED_OVER, "already handed over")
    finished = await target.carry_out(command(CommandAction.FINISH_MIGRATION, vm_id))
    assert finished.status is ReportedStatus.RUNNING
    assert target.heartbeat().vm_ids == [vm_id]
    assert vm_id in source_hv.vms  # leftovers until told to clean up
    cleaned = await source.carry_out(command(CommandAction.CLEANUP_MIGRATION, vm_id))
    assert cleaned.status is ReportedStatus.CLEANED_UP
    assert vm_id not in source_hv.vms


async def test_a_rollback_after_the_hand_over_resumes_the_vm_on_the_source_and_empties_the_target() -> None:
    vm_id = uuid.uuid4()
    source_hv, target_hv = fake("src-1"), fake("dst-1", fail_steps=["finish_migration"])
    source, target = agent("src-1", source_hv, vm_ids=[vm_id]), agent("dst-1", target_hv)
    await target.carry_out(command(CommandAction.PREPARE_MIGRATION, vm_id))
    await source.carry_out(command(CommandAction.MIGRATE, vm_id))
    failed = await target.carry_out(command(CommandAction.FINISH_MIGRATION, vm_id))
    assert failed.status is ReportedStatus.FAILED
    assert "finish_migration" in failed.message
    aborted = await target.carry_out(command(CommandAction.ABORT_MIGRATION, vm_id))
    resumed = await source.carry_out(command(CommandAction.ROLLBACK_MIGRATION, vm_id))
    assert (aborted.status, resumed.status) == (ReportedStatus.ABORTED, ReportedStatus.RUNNING)
    assert (source.heartbeat().vm_ids, target.heartbeat().vm_ids) == ([vm_id], [])
    assert vm_id not in target_hv.vms


async def test_a_failed_hand_over_keeps_the_vm_running_on_the_source() -> None:
    vm_id = uuid.uuid4()
    source = agent("src-1", fake("src-1", fail_steps=["migrate_vm"]), vm_ids=[vm_id])
    failed = await source.carry_out(command(CommandAction.MIGRATE, vm_id))
    assert failed.status is ReportedStatus.FAILED
    assert source.heartbeat().vm_ids == [vm_id]
    kept = await source.carry_out(command(CommandAction.ROLLBACK_MIGRATION, vm_id))
    assert (kept.status, kept.message) == (ReportedStatus.RUNNING, "never handed over")


async def test_stop_and_start_are_carried_out_once_and_the_vm_stays_listed() -> None:
    vm_id = uuid.uuid4()
    hypervisor = fake("host-1")
    host = agent("host-1", hypervisor, vm_ids=[vm_id])
    stopped = await host.carry_out(command(CommandAction.STOP, vm_id))
    repeat = await host.carry_out(command(CommandAction.STOP, vm_id))
    assert (stopped.status, repeat.status, repeat.message) == (
        ReportedStatus.STOPPED,
        ReportedStatus.STOPPED,
        "already stopped",
    )
    assert host.is_stopped(vm_id)
    assert host.heartbeat().vm_ids == [vm_id]
    started = await host.carry_out(command(CommandAction.START, vm_id))
    assert started.status is ReportedStatus.RUNNING
    assert not host.is_stopped(vm_id)
    assert hypervisor.stopped == set()


async def test_an_agent_refuses_what_it_does_not_declare_without_calling_its_hypervisor() -> None:
    vm_id = uuid.uuid4()
    host = agent("host-1", RecordingHypervisor(), vm_ids=[vm_id])
    for action in (CommandAction.PREPARE_MIGRATION, CommandAction.MIGRATE, CommandAction.STOP):
        report = await host.carry_out(command(action, vm_id))
        assert report.status is ReportedStatus.FAILED
        assert "capability" in report.message
    declared_only = agent("host-2", RecordingHypervisor(), vm_ids=[vm_id], capabilities=["power"])
    report = await declared_only.carry_out(command(CommandAction.STOP, vm_id))
    assert report.status is ReportedStatus.FAILED  # declared but not implemented: the AttributeError's text
    assert "stop_vm" in report.message
