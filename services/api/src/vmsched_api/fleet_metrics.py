"""The fleet gauges (hosts by status, VMs by status, capacity and allocation per resource), read from PostgreSQL
when /metrics is scraped: the truth, as fresh as the scrape, and no work between scrapes.

A host counts once: ``offline`` when it is, else ``paused`` when an operator paused scheduling on
it, else its reported status (``online`` or ``draining``). Capacity and allocation sum the hosts
that are not offline (an offline host's VMs are failed and its capacity gone). Capacity is the
hardware's, before any overcommit ratio.

VMs count by status (Orchard's ``orchard_vms{status}``), every status but ``deleted``: deleted VMs
only ever grow in number, and each status is counted from the ``(status, ...)`` index.
"""

from __future__ import annotations

from prometheus_client import Gauge
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import HostStatus
from vmsched_contract.status import VmStatus
from vmsched_pg.engine import retry_on_dead_connection

HOSTS = Gauge("vmsched_hosts", "Known hosts by status", ["status"])
VMS = Gauge("vmsched_vms", "VMs by status (deleted ones are not counted)", ["status"])
RESOURCE_CAPACITY = Gauge("vmsched_resource_capacity", "Capacity of online hosts", ["resource"])
RESOURCE_ALLOCATED = Gauge("vmsched_resource_allocated", "Allocated resources on online hosts", ["resource"])

PAUSED = "paused"
STATUSES = (HostStatus.ONLINE.value, HostStatus.DRAINING.value, HostStatus.OFFLINE.value, PAUSED)
RESOURCES = ("cpu", "memory_mb", "disk_gb", "gpu")
VM_STATUSES = tuple(status.value for status in VmStatus if status is not VmStatus.DELETED)

# One index probe per status (a LATERAL count each) instead of a scan of every VM ever made.
_VMS = text(
    """
    SELECT s.status, c.vms
      FROM unnest(CAST(:statuses AS text[])) AS s(status)
     CROSS JOIN LATERAL (SELECT count(*) AS vms FROM vms WHERE vms.status = s.status) AS c
    """
)

_FLEET = text(
    """
    SELECT CASE WHEN status = 'offline' THEN 'offline'
                WHEN scheduling_paused THEN 'paused'
                ELSE status END AS shown,
           count(*) AS hosts,
           coalesce(sum(cpu), 0) AS cpu, coalesce(sum(memory_mb), 0) AS memory_mb,
           coalesce(sum(disk_gb), 0) AS disk_gb, coalesce(sum(gpu), 0) AS gpu,
           coalesce(sum(alloc_cpu), 0) AS alloc_cpu, coalesce(sum(alloc_memory_mb), 0) AS alloc_memory_mb,
           coalesce(sum(alloc_disk_gb), 0) AS alloc_disk_gb, coalesce(sum(alloc_gpu), 0) AS alloc_gpu
      FROM hosts
     GROUP BY shown
    """
)


@retry_on_dead_connection
async def refresh_fleet_gauges(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        rows = (await connection.execute(_FLEET)).mappings().all()
        vms = (await connection.execute(_VMS, {"statuses": list(VM_STATUSES)})).all()
    hosts = dict.fromkeys(STATUSES, 0)
    capacity = dict.fromkeys(RESOURCES, 0)
    allocated = dict.fromkeys(RESOURCES, 0)
    for row in rows:
        hosts[row["shown"]] = hosts.get(row["shown"], 0) + int(row["hosts"])
        if row["shown"] == HostStatus.OFFLINE.value:
            continue
        for resource in RESOURCES:
            capacity[resource] += int(row[resource])
            allocated[resource] += int(row[f"alloc_{resource}"])
    for status, count in hosts.items():
        HOSTS.labels(status).set(count)
    for status, count in vms:
        VMS.labels(status).set(int(count))
    for resource in RESOURCES:
        RESOURCE_CAPACITY.labels(resource).set(capacity[resource])
        RESOURCE_ALLOCATED.labels(resource).set(allocated[resource])
