from __future__ import annotations

from dataclasses import asdict

from services.scheduler.tests.placement.support import NOW, TIMEOUT, host
from vmsched_scheduler.placement import render_scheduling_info, scheduling_info


def test_scheduling_info_renders_the_seed_block_exactly() -> None:
    seed_host = host("hypervisor-01", used_cpu=12, used_memory_mb=24576, used_disk_gb=100, vm_count=8)
    assert render_scheduling_info(scheduling_info(seed_host, NOW, TIMEOUT)) == (
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
    lines = render_scheduling_info(scheduling_info(gpu_host, NOW, TIMEOUT)).splitlines()
    assert lines[2] == "CPU: 8/32 (25.0% used)"
    assert lines[6:] == [
        "GPU: 1/4 (25.0% used)",
        "Labels: gpu=a100, zone=eu-1",
        "Scheduling: paused",
        "Overcommit: cpu 2.0x of 16",
    ]


def test_scheduling_info_shows_an_online_host_with_an_old_heartbeat_as_offline() -> None:
    info = scheduling_info(host("hv-02", heartbeat_age=42.0), NOW, TIMEOUT)
    assert info.status == "offline"
    text = render_scheduling_info(info)
    assert "Status: offline" in text
    assert text.endswith("Last heartbeat: 42s ago (timeout 15s)")


def test_scheduling_info_is_plain_data_for_json() -> None:
    data = asdict(scheduling_info(host("hv-01", cpu=0), NOW, TIMEOUT))
    assert data["cpu_percent"] == 0.0
    assert data["agent_id"] == "hv-01"
