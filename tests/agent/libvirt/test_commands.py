"""``vmsched-agent libvirt`` on the real broker (the test playing the gateway) and libvirt's test
driver: each command, as libvirt then sees the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agent.libvirt.conftest import DEFAULT_URI, MakeLibvirtAgent, command, settings_for
from tests.agent.standin import StandInGateway
from vmsched_agent.libvirt.host import VirtHost
from vmsched_agent.libvirt.ports import BYTES_PER_GIB, DomainState, NoSuchDomain
from vmsched_contract.messages import CommandAction, ReportedStatus, Resources


async def test_create_defines_and_starts_the_domain_named_by_the_vm_and_reports_running(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str
) -> None:
    runner = make_libvirt_agent(settings_for(DEFAULT_URI, host_id))
    await runner.start()
    create = command(CommandAction.CREATE, resources=Resources(cpu=3, memory_mb=768, disk_gb=12))

    await gateway.send(host_id, create)

    received = await gateway.status(create.vm_id, ReportedStatus.RUNNING)
    name = str(create.vm_id)
    assert received.report.message == ""
    assert host.state(name) is DomainState.RUNNING
    domain = next(d for d in host.domains() if d.name == name)
    assert (domain.uuid, domain.vcpus, domain.memory_kib) == (name, 3, 768 * 1024)
    volume = host.volume("default-pool", f"{name}.qcow2")
    assert volume is not None
    assert (volume.format, volume.capacity_bytes) == ("qcow2", 12 * BYTES_PER_GIB)
    assert "<title>web-1</title>" in host.domain_xml(name)
    beat = await gateway.heartbeat(host_id, lambda b: create.vm_id in b.vm_ids)
    assert beat.capacity == Resources(cpu=16, memory_mb=3072, disk_gb=100, gpu=0)
    assert beat.capabilities == ["power"]  # no migration URI: no migrations
    assert beat.networks == sorted(host.networks())  # libvirt's networks: the ones the host reaches


async def test_delete_destroys_undefines_and_removes_the_volume_then_reports_deleted(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str
) -> None:
    runner = make_libvirt_agent(settings_for(DEFAULT_URI, host_id))
    await runner.start()
    create = command(CommandAction.CREATE)
    await gateway.send(host_id, create)
    await gateway.status(create.vm_id, ReportedStatus.RUNNING)

    await gateway.send(host_id, command(CommandAction.DELETE, create.vm_id))

    await gateway.status(create.vm_id, ReportedStatus.DELETED)
    with pytest.raises(NoSuchDomain):
        host.state(str(create.vm_id))
    assert host.volume("default-pool", f"{create.vm_id}.qcow2") is None
    assert runner.agent.vm_ids == frozenset()


async def test_stop_shuts_the_domain_off_and_start_runs_it_again(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str
) -> None:
    runner = make_libvirt_agent(settings_for(DEFAULT_URI, host_id))
    await runner.start()
    create = command(CommandAction.CREATE)
    await gateway.send(host_id, create)
    await gateway.status(create.vm_id, ReportedStatus.RUNNING)
    name = str(create.vm_id)

    await gateway.send(host_id, command(CommandAction.STOP, create.vm_id))
    await gateway.status(create.vm_id, ReportedStatus.STOPPED)
    stopped = host.state(name)
    await gateway.send(host_id, command(CommandAction.START, create.vm_id))
    await gateway.status(create.vm_id, ReportedStatus.RUNNING, count=2)

    assert stopped is DomainState.SHUT_OFF
    assert host.state(name) is DomainState.RUNNING
    assert host.volume("default-pool", f"{name}.qcow2") is not None  # the disk stays with a stopped VM


async def test_a_create_with_no_room_in_the_pool_fails_with_the_numbers_and_leaves_nothing(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str
) -> None:
    runner = make_libvirt_agent(settings_for(DEFAULT_URI, host_id))
    await runner.start()
    first = command(CommandAction.CREATE, resources=Resources(cpu=1, memory_mb=256, disk_gb=60))
    await gateway.send(host_id, first)
    await gateway.status(first.vm_id, ReportedStatus.RUNNING)
    second = command(CommandAction.CREATE, resources=Resources(cpu=1, memory_mb=256, disk_gb=60))

    await gateway.send(host_id, second)

    failed = await gateway.status(second.vm_id, ReportedStatus.FAILED)
    assert failed.report.message == (
        "no room in pool default-pool: disk: needs 60 GiB, 40 GiB free (100 GiB total, 60 GiB given to volumes)"
    )
    assert str(second.vm_id) not in {d.name for d in host.domains()}
    assert host.volume("default-pool", f"{second.vm_id}.qcow2") is None
    assert runner.agent.vm_ids == {first.vm_id}


async def test_a_domain_libvirt_refuses_fails_with_libvirts_message_and_leaves_nothing(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str, tmp_path: Path
) -> None:
    template = tmp_path / "bad.xml"
    # Well-formed, so the agent starts; libvirt refuses the memory's unit when the domain is defined.
    template.write_text(
        "<domain type='$domain_type'><name>$name</name><memory unit='parsecs'>$memory_mib</memory>"
        "<vcpu>$vcpus</vcpu><os><type>hvm</type></os></domain>"
    )
    runner = make_libvirt_agent(settings_for(DEFAULT_URI, host_id, template=template))
    await runner.start()
    create = command(CommandAction.CREATE)

    await gateway.send(host_id, create)

    failed = await gateway.status(create.vm_id, ReportedStatus.FAILED)
    assert "parsecs" in failed.report.message  # libvirt's own words
    assert str(create.vm_id) not in {d.name for d in host.domains()}
    assert host.volume("default-pool", f"{create.vm_id}.qcow2") is None
    assert runner.agent.vm_ids == frozenset()


async def test_a_restarted_agent_keeps_the_domains_it_finds_and_reports_them(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str
) -> None:
    settings = settings_for(DEFAULT_URI, host_id)
    first = make_libvirt_agent(settings)
    await first.start()
    running, stopped = command(CommandAction.CREATE), command(CommandAction.CREATE)
    for create in (running, stopped):
        await gateway.send(host_id, create)
        await gateway.status(create.vm_id, ReportedStatus.RUNNING)
    await gateway.send(host_id, command(CommandAction.STOP, stopped.vm_id))
    await gateway.status(stopped.vm_id, ReportedStatus.STOPPED)
    await first.stop()  # its connection closes; the host (held by the fixture) runs on

    second = make_libvirt_agent(settings)
    await second.start()

    assert second.agent.vm_ids == {running.vm_id, stopped.vm_id}
    assert second.agent.is_stopped(stopped.vm_id)
    assert not second.agent.is_stopped(running.vm_id)
    assert host.state(str(running.vm_id)) is DomainState.RUNNING
    assert host.state(str(stopped.vm_id)) is DomainState.SHUT_OFF
    beat = await gateway.heartbeat(host_id, lambda b: b.instance_id == second.agent.instance_id)
    assert set(beat.vm_ids) == {running.vm_id, stopped.vm_id}
    # A create delivered again after the restart is recognised: no second domain, no error.
    await gateway.send(host_id, running)
    again = await gateway.status(running.vm_id, ReportedStatus.RUNNING, count=2)
    assert again.report.message == "already running on this host"


async def test_domains_vmsched_did_not_make_are_neither_reported_nor_touched(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str
) -> None:
    runner = make_libvirt_agent(settings_for(DEFAULT_URI, host_id))

    await runner.start()
    await runner.stop()

    assert runner.discovery is not None
    assert [domain.name for domain in runner.discovery.domains.foreign] == ["test"]  # the test driver's own
    assert runner.agent.vm_ids == frozenset()
    assert host.state("test") is DomainState.RUNNING


async def test_heartbeats_carry_the_usage_measured_from_domain_statistics(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str
) -> None:
    runner = make_libvirt_agent(settings_for(DEFAULT_URI, host_id))
    await runner.start()
    create = command(CommandAction.CREATE, resources=Resources(cpu=2, memory_mb=1024, disk_gb=10))
    await gateway.send(host_id, create)
    await gateway.status(create.vm_id, ReportedStatus.RUNNING)
    after = len(gateway.heartbeats)

    # The test driver's domains each count one core busy (their CPU time is the wall clock) and
    # hold their current memory: the driver's own "test" (2 GiB) and ours (1 GiB). Ours counts for
    # its CPU from its second sample on.
    beat = await gateway.heartbeat(
        host_id,
        lambda b: b.usage is not None and b.usage.memory_used_mb == 3072 and b.usage.cpu_used >= 1.5,
        after=after,
    )

    assert beat.usage is not None
    assert beat.usage.cpu_used <= 2.5
