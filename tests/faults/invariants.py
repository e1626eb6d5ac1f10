"""The invariants of design.md, checked against PostgreSQL (the truth) and what the agents received."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from uuid import UUID

import asyncpg

from vmsched_agent.simulator import SimulatedFleet
from vmsched_common.messages import CommandAction

FINAL = {"scheduled", "running", "unschedulable", "failed", "deleted", "stopped"}
# The statuses that hold capacity (vmsched_common.lifecycle.HOLDS_CAPACITY, written out: this checker
# is a second opinion, not a copy of the code it checks); a migrating VM holds its migration target
# as well.
ALLOCATING = ("scheduled", "running", "unknown", "deleting", "stopped", "migrating")
RESOURCES = ("cpu", "memory_mb", "disk_gb", "gpu")


@dataclass
class Report:
    vms: int = 0
    placed: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


async def check(dsn: str, vm_ids: list[str], fleet: SimulatedFleet | None = None) -> Report:
    conn = await asyncpg.connect(dsn)
    try:
        vms = await conn.fetch(
            "SELECT id, status, hypervisor_id, cpu, memory_mb, disk_gb, gpu FROM vms WHERE id = ANY($1::uuid[])", vm_ids
        )
        hosts = await conn.fetch("SELECT * FROM hosts")
        sums = await conn.fetch(
            """SELECT hypervisor_id, sum(cpu) cpu, sum(memory_mb) memory_mb, sum(disk_gb) disk_gb, sum(gpu) gpu,
                      count(*) n
                 FROM (SELECT hypervisor_id, cpu, memory_mb, disk_gb, gpu FROM vms
                        WHERE status = ANY($1::text[]) AND hypervisor_id IS NOT NULL
                       UNION ALL
                       SELECT migration_target, cpu, memory_mb, disk_gb, gpu FROM vms
                        WHERE status = 'migrating' AND migration_target IS NOT NULL) shares
               GROUP BY hypervisor_id""",
            list(ALLOCATING),
        )
    finally:
        await conn.close()
    report = Report(vms=len(vms))
    if len(vms) != len(vm_ids):
        report.problems.append(f"{len(vm_ids) - len(vms)} accepted VMs missing from PostgreSQL")
    counts: dict[str, int] = defaultdict(int)
    for vm in vms:
        counts[vm["status"]] += 1
        if vm["status"] not in FINAL:
            report.problems.append(f"VM {vm['id']} not in a final state: {vm['status']}")
    report.by_status = dict(counts)
    used = {row["hypervisor_id"]: row for row in sums}
    nothing = dict.fromkeys(RESOURCES, 0)
    for host in hosts:
        total = used.get(host["id"], nothing)
        limits = {
            "cpu": math.floor((host["cpu"] - host["reserved_cpu"]) * host["cpu_ratio"] + 1e-9),
            "memory_mb": math.floor((host["memory_mb"] - host["reserved_memory_mb"]) * host["memory_ratio"] + 1e-9),
            "disk_gb": math.floor((host["disk_gb"] - host["reserved_disk_gb"]) * host["disk_ratio"] + 1e-9),
            "gpu": host["gpu"] - host["reserved_gpu"],
        }
        for resource, limit in limits.items():
            if total[resource] > limit:
                report.problems.append(f"host {host['id']} overcommitted on {resource}: {total[resource]} > {limit}")
            if host[f"alloc_{resource}"] != total[resource]:
                report.problems.append(
                    f"host {host['id']} alloc_{resource}={host[f'alloc_{resource}']} but its VMs hold {total[resource]}"
                )
    placed = [vm for vm in vms if vm["status"] in ("scheduled", "running")]
    report.placed = len(placed)
    if fleet is not None:
        told: dict[UUID, set[str]] = defaultdict(set)
        for host_id in fleet.commands_received:
            for command in fleet.received(host_id):
                if command.action is CommandAction.CREATE:
                    told[command.vm_id].add(host_id)
        for vm in placed:
            hosts_told = told.get(UUID(str(vm["id"])), set())
            if hosts_told != {vm["hypervisor_id"]}:
                report.problems.append(
                    f"VM {vm['id']} on {vm['hypervisor_id']} but create commands went to {hosts_told}"
                )
    return report
