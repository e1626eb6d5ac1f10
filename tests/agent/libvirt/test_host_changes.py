"""What the host is and how it goes: GPUs counted and handed out, libvirt lost and found again."""

from __future__ import annotations

from collections.abc import Callable

from tests.agent.libvirt.conftest import DEFAULT_URI, MakeLibvirtAgent, RecordingOpener, command, settings_for
from tests.agent.standin import StandInGateway
from vmsched_agent.libvirt.host import VirtHost
from vmsched_agent.libvirt.template import hostdev_addresses
from vmsched_contract.messages import CommandAction, HostStatus, ReportedStatus, Resources

GPU_VM = Resources(cpu=2, memory_mb=1024, disk_gb=10, gpu=1)


async def test_a_host_of_our_own_reports_its_size_and_gpus_and_hands_each_gpu_to_one_vm(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, node_uri: Callable[[str], str], host_id: str
) -> None:
    opener = RecordingOpener()
    runner = make_libvirt_agent(settings_for(node_uri("gpu"), host_id, labels="zone=z1,gpu=v100"), opener=opener)
    await runner.start()
    host = opener.opened[0]  # a node file's host lives in the connection that opened it: the agent's
    first, second = command(CommandAction.CREATE, resources=GPU_VM), command(CommandAction.CREATE, resources=GPU_VM)

    beat = await gateway.heartbeat(host_id)
    await gateway.send(host_id, first)
    await gateway.status(first.vm_id, ReportedStatus.RUNNING)
    await gateway.send(host_id, second)
    refused = await gateway.status(second.vm_id, ReportedStatus.FAILED)

    assert beat.capacity == Resources(cpu=8, memory_mb=8192, disk_gb=100, gpu=1)
    assert beat.labels == {"zone": "z1", "gpu": "v100"}
    assert [str(a) for a in hostdev_addresses(host.domain_xml(str(first.vm_id)))] == ["0000:01:00.0"]
    assert refused.report.message == f"no room on {host_id}: gpu: needs 1, 0 free (1 total)"
    assert str(second.vm_id) not in {domain.name for domain in host.domains()}


async def test_a_lost_libvirt_connection_is_reported_in_heartbeats_and_reopened(
    make_libvirt_agent: MakeLibvirtAgent, gateway: StandInGateway, host: VirtHost, host_id: str
) -> None:
    opener = RecordingOpener()
    runner = make_libvirt_agent(settings_for(DEFAULT_URI, host_id), opener=opener)
    await runner.start()
    opener.refuse = "Failed to connect socket to '/var/run/libvirt/libvirt-sock': Connection refused"

    opener.opened[0].close()  # as libvirtd going away does to it
    beat = await gateway.heartbeat(host_id, lambda b: b.status is HostStatus.DRAINING)
    # Once a reopening was tried (and refused), that is why it is down.
    await gateway.wait_for(lambda: runner.connection.lost_because == opener.refuse or None)
    during = command(CommandAction.CREATE)
    await gateway.send(host_id, during)
    failed = await gateway.status(during.vm_id, ReportedStatus.FAILED)
    opener.refuse = None  # libvirtd is back
    back = await gateway.heartbeat(host_id, lambda b: b.status is HostStatus.ONLINE, after=len(gateway.heartbeats))
    after = command(CommandAction.CREATE)
    await gateway.send(host_id, after)
    await gateway.status(after.vm_id, ReportedStatus.RUNNING)

    assert beat.usage is None
    assert failed.report.message == (
        "libvirt at test:///default is unreachable: "
        "Failed to connect socket to '/var/run/libvirt/libvirt-sock': Connection refused"
    )
    assert back.agent_id == host_id
    assert runner.connection.reconnections == 1
    assert str(after.vm_id) in {domain.name for domain in host.domains()}
