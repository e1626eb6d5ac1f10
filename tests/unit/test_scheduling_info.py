"""The seed's getSchedulingInfo: the block as text, the same facts as data, from PostgreSQL's host row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, replace
from datetime import UTC, datetime

from vmsched_api.scheduling_info import SchedulingInfo, render_scheduling_info, scheduling_info
from vmsched_contract.messages import ZERO, Overcommit, Resources
from vmsched_domain.records import HostRecord

NOW = 1_000_000.0
TIMEOUT = 15.0


def host(
    host_id: str,
    *,
    cpu: int = 16,
    memory_mb: int = 32768,
    disk_gb: int = 500,
    gpu: int = 0,
    used_cpu: int = 0,
    used_memory_mb: int = 0,
    used_disk_gb: int = 0,
    used_gpu: int = 0,
    vm_count: int = 0,
    labels: Mapping[str, str] | None = None,
    paused: bool = False,
    cpu_ratio: float = 1.0,
    reserved: Resources = ZERO,
    heartbeat_age: float = 1.0,
) -> HostRecord:
    return HostRecord(
        id=host_id,
        status="online",
        labels=dict(labels or {}),
        capacity=Resources(cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb, gpu=gpu),
        overcommit=Overcommit(cpu=cpu_ratio),
        reserved=reserved,
        allocated=Resources(cpu=used_cpu, memory_mb=used_memory_mb, disk_gb=used_disk_gb, gpu=used_gpu),
        vm_count=vm_count,
        scheduling_paused=paused,
        last_heartbeat=datetime.fromtimestamp(NOW - heartbeat_age, UTC),
    )


def facts(of: HostRecord, running: int | None = None) -> SchedulingInfo:
    """Its facts, with every VM holding room on it running unless told otherwise."""
    return scheduling_info(of, NOW, TIMEOUT, of.vm_count if running is None else running)


def test_scheduling_info_renders_the_seed_block_exactly() -> None:
    seed_host = host("hypervisor-01", used_cpu=12, used_memory_mb=24576, used_disk_gb=100, vm_count=8)
    assert render_scheduling_info(facts(seed_host)) == (
        "Agent: hypervisor-01\n"
        "Status: online\n"
        "CPU: 12/16 (75.0% used)\n"
        "Memory: 24.0 GB/32.0 GB (75.0% used)\n"
        "Disk: 100.0 GB/500.0 GB (20.0% used)\n"
        "Running VMs: 8"
    )


def test_scheduling_info_adds_gpu_labels_pause_and_overcommit_lines_when_they_apply() -> None:
    gpu_host = host(
        "hv-07",
        gpu=4,
        used_gpu=1,
        labels={"zone": "eu-1", "gpu": "a100"},
        paused=True,
        cpu_ratio=2.0,
        used_cpu=8,
    )
    lines = render_scheduling_info(facts(gpu_host)).splitlines()
    assert lines[2] == "CPU: 8/32 (25.0% used)"
    assert lines[6:] == [
        "GPU: 1/4 (25.0% used)",
        "Labels: gpu=a100, zone=eu-1",
        "Scheduling: paused",
        "Overcommit: cpu 2.0x of 16",
    ]


def test_scheduling_info_shows_an_online_host_with_an_old_heartbeat_as_offline() -> None:
    info = facts(host("hv-02", heartbeat_age=42.0))
    assert info.status == "offline"
    text = render_scheduling_info(info)
    assert "Status: offline" in text
    assert text.endswith("Last heartbeat: 42s ago (timeout 15s)")


def test_totals_are_what_the_fit_rule_lets_vms_have() -> None:
    reserved = Resources(cpu=2, memory_mb=2048, disk_gb=0, gpu=0)
    info = facts(host("hv-03", cpu=16, cpu_ratio=2.0, reserved=reserved))
    assert (info.cpu_total, info.memory_total_mb) == (28, 30720)  # (16 - 2) x 2, 32768 - 2048
    assert render_scheduling_info(info).splitlines()[-1] == "Reserved for the hypervisor: 2 vCPU, 2.0 GB memory"


def test_scheduling_info_is_plain_data_for_json() -> None:
    data = asdict(facts(host("hv-01", cpu=0)))
    assert data["cpu_percent"] == 0.0
    assert data["agent_id"] == "hv-01"


def test_named_extra_resources_get_a_line_of_their_own() -> None:
    fpga_host = replace(
        host("hv-x"),
        capacity=Resources(cpu=16, memory_mb=32768, disk_gb=500, extra={"fpga": 2, "nic": 4}),
        allocated=Resources(cpu=1, memory_mb=1024, disk_gb=10, extra={"fpga": 1}),
    )
    info = facts(fpga_host)
    assert (info.extra_total, info.extra_used) == ({"fpga": 2, "nic": 4}, {"fpga": 1})
    assert "Extra: fpga 1/2, nic 0/4" in render_scheduling_info(info).splitlines()
    plain = render_scheduling_info(facts(host("hv-y")))
    assert not any(line.startswith("Extra") for line in plain.splitlines())


def test_running_vms_counts_only_running_ones_and_what_else_holds_room_is_said_apart() -> None:
    # 3 shares held: one running VM, a stopped one and a reservation's slot.
    info = facts(host("hv-04", used_cpu=6, vm_count=3), running=1)
    lines = render_scheduling_info(info).splitlines()
    assert lines[5] == "Running VMs: 1"
    assert "Holding room: 3 (VMs stopped or on their way too, reservation slots)" in lines
    assert (info.running_vms, info.vms_holding_room) == (1, 3)
    assert not any(
        line.startswith("Holding room") for line in render_scheduling_info(facts(host("hv-05"))).splitlines()
    )
