"""The invariants of design.md, checked against PostgreSQL (the truth) and what the agents received."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from uuid import UUID

import asyncpg
import redis.asyncio as aioredis

from vmsched_agent.simulator import SimulatedFleet
from vmsched_contract.messages import CommandAction

FINAL = {"scheduled", "running", "unschedulable", "failed", "deleted", "stopped"}
# The statuses that hold capacity (vmsched_domain.lifecycle.HOLDS_CAPACITY, written out: this checker
# is a second opinion, not a copy of the code it checks); a migrating VM holds its migration target
# as well, and a reservation's held slot its host's room (no extras: a slot has none).
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
        # One snapshot: the hosts' recorded allocations and the shares they must add up to, read
        # apart, could straddle a change committed in between (a report settling a migration).
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            vms = await conn.fetch(
                "SELECT id, status, hypervisor_id, cpu, memory_mb, disk_gb, gpu FROM vms WHERE id = ANY($1::uuid[])",
                vm_ids,
            )
            hosts = await conn.fetch("SELECT * FROM hosts")
            sums = await conn.fetch(
                """SELECT hypervisor_id, sum(cpu) cpu, sum(memory_mb) memory_mb, sum(disk_gb) disk_gb, sum(gpu) gpu,
                          count(*) n
                     FROM (SELECT hypervisor_id, cpu, memory_mb, disk_gb, gpu FROM vms
                            WHERE status = ANY($1::text[]) AND hypervisor_id IS NOT NULL
                           UNION ALL
                           SELECT migration_target, cpu, memory_mb, disk_gb, gpu FROM vms
                            WHERE status = 'migrating' AND migration_target IS NOT NULL
                           UNION ALL
                           SELECT hypervisor_id, cpu, memory_mb, disk_gb, gpu FROM reservation_slots
                            WHERE status = 'held') shares
                   GROUP BY hypervisor_id""",
                list(ALLOCATING),
            )
            extra_rows = await conn.fetch(
                """SELECT v.host AS hypervisor_id, e.key AS name, sum(e.value::bigint) AS held
                     FROM (SELECT hypervisor_id AS host, extra FROM vms
                            WHERE status = ANY($1::text[]) AND hypervisor_id IS NOT NULL
                           UNION ALL
                           SELECT migration_target, extra FROM vms
                            WHERE status = 'migrating' AND migration_target IS NOT NULL) v
                    CROSS JOIN LATERAL jsonb_each_text(v.extra) e
                    GROUP BY v.host, e.key""",
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
        # Named extra resources: never overcommitted, nothing reserved.
        held = {row["name"]: int(row["held"]) for row in extra_rows if row["hypervisor_id"] == host["id"]}
        held = {name: amount for name, amount in held.items() if amount}
        offered, recorded = _counts(host["extra"]), _counts(host["alloc_extra"])
        for name, amount in held.items():
            if amount > offered.get(name, 0):
                report.problems.append(
                    f"host {host['id']} overcommitted on extra {name}: {amount} > {offered.get(name, 0)}"
                )
        if recorded != held:
            report.problems.append(f"host {host['id']} alloc_extra={recorded} but its VMs hold {held}")
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


def _counts(raw: object) -> dict[str, int]:
    """A JSONB {name: count} as asyncpg returns it (text), without zeros."""
    parsed = json.loads(raw) if isinstance(raw, str) else dict(raw or {})  # type: ignore[call-overload]
    return {str(name): int(count) for name, count in parsed.items() if int(count)}


async def snapshot_problems(dsn: str, redis_url: str, prefix: str, host_prefix: str) -> list[str]:
    """Where the Redis snapshot disagrees with PostgreSQL for the hosts whose id starts with
    ``host_prefix``: each must be there, synced, with PostgreSQL's capacity, allocation (named extras
    included) and VM count, and hold one claim per share PostgreSQL counts on it: a VM's (its id), a
    migrating VM's on its target as well (``<id>:target``), a held reservation slot's (its id); none
    left behind, none missing.
    (Read field by field from Redis: a second opinion, not the snapshot module's own reader.)"""
    conn = await asyncpg.connect(dsn)
    try:
        hosts = await conn.fetch("SELECT * FROM hosts WHERE id LIKE $1 ORDER BY id", f"{host_prefix}%")
        share_rows = await conn.fetch(
            """SELECT hypervisor_id AS host, id::text AS claim FROM vms
                WHERE status = ANY($1::text[]) AND hypervisor_id LIKE $2
               UNION ALL
               SELECT migration_target, id::text || ':target' FROM vms
                WHERE status = 'migrating' AND migration_target LIKE $2
               UNION ALL
               SELECT hypervisor_id, id::text FROM reservation_slots
                WHERE status = 'held' AND hypervisor_id LIKE $2""",
            list(ALLOCATING),
            f"{host_prefix}%",
        )
    finally:
        await conn.close()
    shares: dict[str, set[str]] = defaultdict(set)
    for row in share_rows:
        shares[row["host"]].add(row["claim"])
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    problems = []
    try:
        for host in hosts:
            raw = {str(k): str(v) for k, v in (await client.hgetall(f"{prefix}:host:{host['id']}")).items()}
            if raw.get("synced") != "1":
                problems.append(f"host {host['id']}: not in the snapshot, or not synced ({sorted(raw)[:5]})")
                continue
            for resource in RESOURCES:
                pairs = ((resource, resource), (f"a_{resource}", f"alloc_{resource}"))
                for field_name, column in pairs:
                    if int(raw.get(field_name, -1)) != host[column]:
                        problems.append(
                            f"host {host['id']}: Redis {field_name}={raw.get(field_name)}, "
                            f"PostgreSQL {column}={host[column]}"
                        )
            if int(raw.get("vm_count", -1)) != host["vm_count"]:
                problems.append(
                    f"host {host['id']}: Redis vm_count={raw.get('vm_count')}, PostgreSQL {host['vm_count']}"
                )
            if _counts(raw.get("a_extra", "{}")) != _counts(host["alloc_extra"]):
                problems.append(
                    f"host {host['id']}: Redis a_extra={raw.get('a_extra')}, "
                    f"PostgreSQL alloc_extra={host['alloc_extra']}"
                )
            claims = set(await client.smembers(f"{prefix}:host:{host['id']}:vms"))
            held = shares.get(host["id"], set())
            if claims != held:
                problems.append(
                    f"host {host['id']}: claims in Redis but no share in PostgreSQL {sorted(claims - held)[:5]}, "
                    f"shares without a claim {sorted(held - claims)[:5]}"
                )
    finally:
        await client.aclose()
    return problems
