"""Test fixtures' building blocks on the real servers: an online host's heartbeat write, a VM row,
and the removal of a test's Redis keys."""

from __future__ import annotations

import json
import time
import uuid

from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import ZERO, Overcommit, Resources
from vmsched_domain.records import HostRecord
from vmsched_pg.rows import HOST_COLUMNS, host_from_row
from vmsched_redis.host_hash import HostWrite

ONE_SMALL_VM = Resources(cpu=1, memory_mb=512, disk_gb=1)


def online_host(
    host_id: str,
    capacity: Resources,
    *,
    allocated: Resources = ZERO,
    vm_count: int = 0,
    labels: dict[str, str] | None = None,
    overcommit: Overcommit | None = None,
    reserved: Resources = ZERO,
) -> HostWrite:
    """The heartbeat of an online, unpaused host (unlabelled, without overcommit unless told), beating now."""
    return HostWrite(
        host_id=host_id,
        capacity=capacity,
        overcommit=overcommit or Overcommit(),
        reserved=reserved,
        labels=labels or {},
        status="online",
        heartbeat_at=time.time(),
        paused=False,
        allocated=allocated,
        vm_count=vm_count,
    )


async def insert_vm(
    engine: AsyncEngine,
    *,
    status: str,
    host: str | None = None,
    name: str = "v",
    resources: Resources = ONE_SMALL_VM,
) -> uuid.UUID:
    vm_id = uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb, extra) "
                "VALUES (:id, :name, :status, :host, :cpu, :memory_mb, :disk_gb, CAST(:extra AS jsonb))"
            ),
            {
                "id": vm_id,
                "name": name,
                "status": status,
                "host": host,
                "cpu": resources.cpu,
                "memory_mb": resources.memory_mb,
                "disk_gb": resources.disk_gb,
                "extra": json.dumps(dict(resources.extra)),
            },
        )
    return vm_id


async def host_row(engine: AsyncEngine, host_id: str) -> HostRecord:
    """The host as PostgreSQL has it now."""
    async with engine.connect() as connection:
        row = (
            await connection.execute(text(f"SELECT {HOST_COLUMNS} FROM hosts WHERE id = :id"), {"id": host_id})
        ).one()
    return host_from_row(row)


async def delete_keys(redis: Redis, prefix: str) -> None:
    """Every key under ``prefix:``."""
    keys = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await redis.delete(*keys)
