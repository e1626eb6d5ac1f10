"""The seed's ``getSchedulingInfo``: one host's facts for people, as data and as the text block.

Totals are what the fit rule lets VMs have (after reserved capacity and overcommit), the numbers
the scheduler compares against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vmsched_contract.messages import HostStatus, Resources
from vmsched_domain.fit import RESOURCES, allocatable, ratio_of
from vmsched_domain.records import HostRecord

ONLINE = HostStatus.ONLINE.value
OFFLINE = HostStatus.OFFLINE.value


def seconds(value: float) -> str:
    """Seconds for people: ``42``, ``15.4``."""
    return f"{value:.1f}".removesuffix(".0")


def allocatable_resources(host: HostRecord) -> Resources:
    """What the fit rule lets VMs have of each resource on ``host``."""
    return Resources.model_validate(
        {
            rule.field: allocatable(
                getattr(host.capacity, rule.field), getattr(host.reserved, rule.field), ratio_of(rule, host.overcommit)
            )
            for rule in RESOURCES
        }
    )


@dataclass(frozen=True, slots=True)
class SchedulingInfo:
    """What ``GET /v1/hosts/{id}/scheduling-info`` shows; ``dataclasses.asdict`` gives its JSON."""

    agent_id: str
    status: str  # the reported status, or "offline" when an online host's heartbeat is too old
    cpu_used: int
    cpu_total: int  # what VMs may have: (physical - reserved) x cpu ratio
    cpu_percent: float
    memory_used_mb: int
    memory_total_mb: int  # (physical - reserved) x memory ratio
    memory_percent: float
    disk_used_gb: int
    disk_total_gb: int  # (physical - reserved) x disk ratio
    disk_percent: float
    gpu_used: int
    gpu_total: int
    gpu_percent: float
    running_vms: int  # running there (or migrating away from it, running until the target runs it)
    vms_holding_room: int  # every share of the host held: its VMs stopped or on their way too, reservation slots
    labels: Mapping[str, str]
    scheduling_paused: bool
    cpu_ratio: float
    memory_ratio: float
    disk_ratio: float
    cpu_physical: int
    memory_physical_mb: int
    disk_physical_gb: int
    reserved_cpu: int
    reserved_memory_mb: int
    reserved_disk_gb: int
    reserved_gpu: int
    last_heartbeat_age: float  # seconds since the last heartbeat
    offline_timeout: float
    # Named extra resources: what the agent reports of each (never overcommitted) and what is allocated.
    extra_total: Mapping[str, int] = field(default_factory=dict)
    extra_used: Mapping[str, int] = field(default_factory=dict)
    networks: Sequence[str] = ()  # the networks it reaches, sorted
    dedicated_to: str | None = None  # the project whose VMs alone it takes


def percent(used: int, total: int) -> float:
    return 100.0 * used / total if total > 0 else 0.0


def scheduling_info(host: HostRecord, now: float, offline_timeout: float, running_vms: int) -> SchedulingInfo:
    """The facts about ``host`` at time ``now`` (epoch seconds), ``running_vms`` of its VMs running."""
    effective = allocatable_resources(host)
    used = host.allocated
    age = now - (host.last_heartbeat.timestamp() if host.last_heartbeat else 0.0)
    status = OFFLINE if host.status == ONLINE and age > offline_timeout else host.status
    return SchedulingInfo(
        agent_id=host.id,
        status=status,
        cpu_used=used.cpu,
        cpu_total=effective.cpu,
        cpu_percent=percent(used.cpu, effective.cpu),
        memory_used_mb=used.memory_mb,
        memory_total_mb=effective.memory_mb,
        memory_percent=percent(used.memory_mb, effective.memory_mb),
        disk_used_gb=used.disk_gb,
        disk_total_gb=effective.disk_gb,
        disk_percent=percent(used.disk_gb, effective.disk_gb),
        gpu_used=used.gpu,
        gpu_total=effective.gpu,
        gpu_percent=percent(used.gpu, effective.gpu),
        running_vms=running_vms,
        vms_holding_room=host.vm_count,
        labels=dict(host.labels),
        scheduling_paused=host.scheduling_paused,
        cpu_ratio=host.overcommit.cpu,
        memory_ratio=host.overcommit.memory,
        disk_ratio=host.overcommit.disk,
        cpu_physical=host.capacity.cpu,
        memory_physical_mb=host.capacity.memory_mb,
        disk_physical_gb=host.capacity.disk_gb,
        reserved_cpu=host.reserved.cpu,
        reserved_memory_mb=host.reserved.memory_mb,
        reserved_disk_gb=host.reserved.disk_gb,
        reserved_gpu=host.reserved.gpu,
        last_heartbeat_age=age,
        offline_timeout=offline_timeout,
        extra_total=dict(host.capacity.extra),
        extra_used=dict(used.extra),
        networks=sorted(host.networks),
        dedicated_to=host.dedicated_to,
    )


def gigabytes(memory_mb: int) -> str:
    return f"{memory_mb / 1024:.1f} GB"


def render_scheduling_info(info: SchedulingInfo) -> str:
    """The seed's block, then a line per extra fact that applies (GPU, extra resources, networks, labels,
    pause, overcommit).

    Agent: hypervisor-01
    Status: online
    CPU: 12/16 (75.0% used)
    Memory: 24.0 GB/32.0 GB (75.0% used)
    Disk: 100.0 GB/500.0 GB (20.0% used)
    Running VMs: 8
    """
    lines = [
        f"Agent: {info.agent_id}",
        f"Status: {info.status}",
        f"CPU: {info.cpu_used}/{info.cpu_total} ({info.cpu_percent:.1f}% used)",
        f"Memory: {gigabytes(info.memory_used_mb)}/{gigabytes(info.memory_total_mb)} ({info.memory_percent:.1f}% used)",
        f"Disk: {float(info.disk_used_gb):.1f} GB/{float(info.disk_total_gb):.1f} GB ({info.disk_percent:.1f}% used)",
        f"Running VMs: {info.running_vms}",
    ]
    if info.vms_holding_room != info.running_vms:
        lines.append(f"Holding room: {info.vms_holding_room} (VMs stopped or on their way too, reservation slots)")
    if info.gpu_total > 0 or info.gpu_used > 0:
        lines.append(f"GPU: {info.gpu_used}/{info.gpu_total} ({info.gpu_percent:.1f}% used)")
    if info.extra_total or info.extra_used:
        names = sorted({*info.extra_total, *info.extra_used})
        lines.append(
            "Extra: "
            + ", ".join(f"{name} {info.extra_used.get(name, 0)}/{info.extra_total.get(name, 0)}" for name in names)
        )
    if info.networks:
        lines.append("Networks: " + ", ".join(info.networks))
    if info.labels:
        lines.append("Labels: " + ", ".join(f"{key}={value}" for key, value in sorted(info.labels.items())))
    if info.scheduling_paused:
        lines.append("Scheduling: paused")
    if info.dedicated_to is not None:
        lines.append(f"Dedicated to: {info.dedicated_to}")
    overcommit = []
    if info.cpu_ratio != 1.0:
        overcommit.append(f"cpu {float(info.cpu_ratio)}x of {info.cpu_physical}")
    if info.memory_ratio != 1.0:
        overcommit.append(f"memory {float(info.memory_ratio)}x of {gigabytes(info.memory_physical_mb)}")
    if info.disk_ratio != 1.0:
        overcommit.append(f"disk {float(info.disk_ratio)}x of {float(info.disk_physical_gb):.1f} GB")
    if overcommit:
        lines.append("Overcommit: " + ", ".join(overcommit))
    reserved = [
        text
        for amount, text in (
            (info.reserved_cpu, f"{info.reserved_cpu} vCPU"),
            (info.reserved_memory_mb, f"{gigabytes(info.reserved_memory_mb)} memory"),
            (info.reserved_disk_gb, f"{float(info.reserved_disk_gb):.1f} GB disk"),
            (info.reserved_gpu, f"{info.reserved_gpu} GPU"),
        )
        if amount
    ]
    if reserved:
        lines.append("Reserved for the hypervisor: " + ", ".join(reserved))
    if info.status == OFFLINE and info.last_heartbeat_age > info.offline_timeout:
        lines.append(
            f"Last heartbeat: {seconds(info.last_heartbeat_age)}s ago (timeout {seconds(info.offline_timeout)}s)"
        )
    return "\n".join(lines)
