"""The gateway's offline check on the real PostgreSQL: silent hosts go offline and their VMs fail, but
not when no agent at all is heard from (the gateway is more likely cut off than every host dead)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_gateway.store import GatewayStore

pytestmark = pytest.mark.integration

TIMEOUT = 15.0


async def _host(engine: AsyncEngine, host_id: str, silent_for: float) -> uuid.UUID:
    """A host last heard from ``silent_for`` seconds ago, running one VM; the VM's id."""
    vm_id = uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            text(
                """
                INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, alloc_cpu, alloc_memory_mb, alloc_disk_gb,
                                   vm_count, last_heartbeat)
                VALUES (:id, 'online', 16, 65536, 1000, 2, 2048, 20, 1, now() - make_interval(secs => :silent))
                """
            ),
            {"id": host_id, "silent": silent_for},
        )
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb) "
                "VALUES (:id, 'v', 'running', :host, 2, 2048, 20)"
            ),
            {"id": vm_id, "host": host_id},
        )
    return vm_id


async def _status(engine: AsyncEngine, vm_id: uuid.UUID) -> str:
    async with engine.connect() as connection:
        status: str = await connection.scalar(text("SELECT status FROM vms WHERE id = :id"), {"id": vm_id})
    return status


async def test_when_no_agent_is_heard_hosts_go_offline_but_their_vms_are_not_failed(
    private_engine: AsyncEngine,
) -> None:
    store = GatewayStore(private_engine, max_attempts=3)
    first = await _host(private_engine, "hv-o1", silent_for=60)
    second = await _host(private_engine, "hv-o2", silent_for=60)

    check = await store.mark_offline_hosts(TIMEOUT)

    assert sorted(check.offline) == ["hv-o1", "hv-o2"]
    assert check.cut_off
    assert check.lost == []
    assert {await _status(private_engine, first), await _status(private_engine, second)} == {"running"}

    # One agent is heard from again: the cut-off is over, and the hosts still silent lose their VMs.
    async with private_engine.begin() as connection:
        await connection.execute(text("UPDATE hosts SET status = 'online', last_heartbeat = now() WHERE id = 'hv-o2'"))
    check = await store.mark_offline_hosts(TIMEOUT)

    assert not check.cut_off
    assert check.lost == [(first, "hv-o1")]
    assert await _status(private_engine, first) == "failed"
    assert await _status(private_engine, second) == "running"


async def test_a_silent_host_among_live_ones_loses_its_vms_at_once(private_engine: AsyncEngine) -> None:
    store = GatewayStore(private_engine, max_attempts=3)
    silent = await _host(private_engine, "hv-o3", silent_for=60)
    alive = await _host(private_engine, "hv-o4", silent_for=1)

    check = await store.mark_offline_hosts(TIMEOUT)

    assert (check.offline, check.cut_off, check.lost) == (["hv-o3"], False, [(silent, "hv-o3")])
    assert await _status(private_engine, alive) == "running"
    async with private_engine.connect() as connection:
        row = (await connection.execute(text("SELECT alloc_cpu, vm_count FROM hosts WHERE id = 'hv-o3'"))).one()
    assert tuple(row) == (0, 0)  # the failed VM's capacity is given back


async def test_orphans_are_the_vms_an_agent_runs_that_postgresql_holds_elsewhere_or_not_at_all(
    private_engine: AsyncEngine,
) -> None:
    store = GatewayStore(private_engine, max_attempts=3)
    here = await _host(private_engine, "hv-p1", silent_for=1)  # running on hv-p1: not an orphan
    moved = await _host(private_engine, "hv-p2", silent_for=1)  # running on hv-p2, reported by hv-p1
    failed = await _host(private_engine, "hv-p3", silent_for=1)
    async with private_engine.begin() as connection:
        await connection.execute(text("UPDATE vms SET status = 'failed' WHERE id = :id"), {"id": failed})
    unmanaged = uuid.uuid4()  # a VM vmsched never placed: not ours to delete

    orphans = await store.orphans([("hv-p1", [here, moved, unmanaged]), ("hv-p3", [failed])])

    assert sorted((host, row.id) for host, row in orphans) == sorted([("hv-p1", moved), ("hv-p3", failed)])
    assert {row.name for _, row in orphans} == {"v"}  # enough for the delete command
