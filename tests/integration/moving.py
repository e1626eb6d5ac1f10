"""What the migration and power tests read of the truth and of the snapshot, how they wait, and the
fleet the live-migration tests share (tests/integration/live_migration/conftest.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import redis.asyncio as aioredis

from tests.integration.waiting import eventually
from tests.servers import Servers
from vmsched_agent.hosts import HostSpec, Profile, generate_hosts
from vmsched_contract.messages import Capability, Resources, Taint, TaintEffect

RESOURCES = ("cpu", "memory_mb", "disk_gb", "gpu")


@dataclass(frozen=True)
class MigrationFleet:
    """``hosts`` hosts of 8 vCPUs, 16 GiB and 200 GB, each in a zone of its own, labelled
    ``suite=<suite>`` and named ``<suite>-0001``...; the last one's agent declares power, not migrate
    (a VM there cannot move). ``tainted``: they carry ``suite=<suite>:NoSchedule``, so that only VMs
    that tolerate it land there (another module's VM, a waiting one woken, would change a plan)."""

    suite: str
    hosts: int
    tainted: bool = False

    def specs(self) -> list[HostSpec]:
        specs = generate_hosts(
            self.hosts,
            prefix=self.suite,
            capacity=Resources(cpu=8, memory_mb=16384, disk_gb=200),
            profile=Profile.UNIFORM,
            labels={"suite": self.suite},
            zones=self.hosts,
        )
        specs[-1] = specs[-1].model_copy(update={"capabilities": [Capability.POWER.value]})
        if self.tainted:
            taint = Taint(key="suite", value=self.suite, effect=TaintEffect.NO_SCHEDULE)
            specs = [spec.model_copy(update={"taints": [taint]}) for spec in specs]
        return specs

    @property
    def host_ids(self) -> list[str]:
        return [spec.id for spec in self.specs()]


async def suites_vms(servers: Servers, suite: str) -> list[str]:
    """The VMs named ``<suite>-...`` not deleted yet (read from PostgreSQL: the run's other modules
    leave thousands of VMs in the same database)."""
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        rows = await conn.fetch(
            "SELECT id FROM vms WHERE name LIKE $1 AND status <> 'deleted' ORDER BY id", f"{suite}-%"
        )
    finally:
        await conn.close()
    return [str(row["id"]) for row in rows]


@dataclass(frozen=True)
class HostShares:
    """One host's allocations as PostgreSQL records them, as its VMs' shares add up (a VM on it, or
    migrating to it, and a reservation's held slot), and as the Redis snapshot holds them."""

    host_id: str
    recorded: tuple[int, ...]
    of_vms: tuple[int, ...]
    in_redis: tuple[int, ...] | None


async def host_shares(servers: Servers, host_ids: Sequence[str]) -> list[HostShares]:
    conn = await asyncpg.connect(servers.asyncpg_dsn)
    try:
        hosts = await conn.fetch(
            "SELECT id, alloc_cpu, alloc_memory_mb, alloc_disk_gb, alloc_gpu, vm_count FROM hosts "
            "WHERE id = ANY($1::text[]) ORDER BY id",
            list(host_ids),
        )
        # Written out here (not the code's SHARES): a second opinion on what a host holds.
        sums = await conn.fetch(
            """SELECT host, sum(cpu) cpu, sum(memory_mb) memory_mb, sum(disk_gb) disk_gb, sum(gpu) gpu, count(*) n
                 FROM (SELECT hypervisor_id AS host, cpu, memory_mb, disk_gb, gpu FROM vms
                        WHERE status IN ('scheduled', 'running', 'unknown', 'deleting', 'stopped', 'migrating')
                       UNION ALL
                       SELECT migration_target, cpu, memory_mb, disk_gb, gpu FROM vms
                        WHERE status = 'migrating' AND migration_target IS NOT NULL
                       UNION ALL
                       SELECT hypervisor_id, cpu, memory_mb, disk_gb, gpu FROM reservation_slots
                        WHERE status = 'held') s
                WHERE host = ANY($1::text[]) GROUP BY host""",
            list(host_ids),
        )
    finally:
        await conn.close()
    # Each host asked about is compared: an empty answer would make every comparison below vacuous.
    assert [host["id"] for host in hosts] == sorted(set(host_ids)), (list(host_ids), [h["id"] for h in hosts])
    client = aioredis.Redis.from_url(servers.redis_url, decode_responses=True)
    try:
        raws = [await client.hgetall(f"{servers.redis_key_prefix}:host:{host['id']}") for host in hosts]
    finally:
        await client.aclose()
    by_host = {row["host"]: row for row in sums}
    found = []
    for host, raw in zip(hosts, raws, strict=True):
        row: Any = by_host.get(host["id"])
        of_vms = (*(int(row[r]) if row else 0 for r in RESOURCES), int(row["n"]) if row else 0)
        recorded = (*(int(host[f"alloc_{r}"]) for r in RESOURCES), int(host["vm_count"]))
        in_redis = (
            (*(int(raw.get(f"a_{r}", 0)) for r in RESOURCES), int(raw.get("vm_count", 0)))
            if raw.get("synced") == "1"
            else None
        )
        found.append(HostShares(host["id"], recorded, of_vms, in_redis))
    return found


def disagreements(shares: Sequence[HostShares]) -> list[str]:
    """Hosts whose recorded allocations, VMs' shares and snapshot differ."""
    return [
        f"{s.host_id}: recorded {s.recorded}, its VMs {s.of_vms}, Redis {s.in_redis}"
        for s in shares
        if not (s.recorded == s.of_vms == s.in_redis)
    ]


async def claims_of(servers: Servers, vm_id: str) -> dict[str, str | None]:
    """The host of the VM's claim and of its target claim in Redis (None: no such claim)."""
    client = aioredis.Redis.from_url(servers.redis_url, decode_responses=True)
    try:
        prefix = servers.redis_key_prefix
        claim: str | None = await client.hget(f"{prefix}:claim:{vm_id}", "host")  # type: ignore[assignment]
        target: str | None = await client.hget(f"{prefix}:claim:{vm_id}:target", "host")  # type: ignore[assignment]
        return {"claim": claim, "target": target}
    finally:
        await client.aclose()


async def settled(api: httpx.AsyncClient, vm_id: str, *, timeout: float = 60) -> dict[str, Any]:
    """The VM once no task is in flight for it (a migration ended, a stop or start confirmed)."""
    response = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.status_code == 200 and r.json()["task"] is None and r.json()["status"] != "migrating",
        timeout=timeout,
        what=f"VM {vm_id} with nothing in flight",
    )
    vm: dict[str, Any] = response.json()
    return vm


async def running(api: httpx.AsyncClient, body: dict[str, Any], *, timeout: float = 30) -> dict[str, Any]:
    """Create a VM and wait until it runs."""
    created = await api.post("/v1/vms", json=body)
    assert created.status_code == 202, created.text
    vm_id = created.json()["id"]
    response = await eventually(
        lambda: api.get(f"/v1/vms/{vm_id}"),
        lambda r: r.json()["status"] == "running",
        timeout=timeout,
        what=f"VM {vm_id} running",
    )
    vm: dict[str, Any] = response.json()
    return vm


async def open_only(api: httpx.AsyncClient, host_ids: Sequence[str], *open_hosts: str) -> None:
    """Pause every host of ``host_ids`` but ``open_hosts`` (those unpaused): where the next VMs go."""
    for host_id in host_ids:
        response = await api.patch(f"/v1/hosts/{host_id}", json={"scheduling_paused": host_id not in open_hosts})
        assert response.status_code == 200, response.text


async def running_on(
    api: httpx.AsyncClient, host_ids: Sequence[str], host_id: str, bodies: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A VM of each of ``bodies`` running on ``host_id``, the other hosts of ``host_ids`` paused for
    it (and left paused)."""
    assert bodies
    await open_only(api, host_ids, host_id)
    vms = [await running(api, body) for body in bodies]
    assert {vm["hypervisor_id"] for vm in vms} == {host_id}
    return vms
