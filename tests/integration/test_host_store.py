"""The gateway's host writes on the real PostgreSQL: silent hosts go offline and their VMs unknown
(nothing failed); hosts lost for good have their VMs failed and capacity freed; a host that comes back
settles its unknown VMs from its heartbeat; VMs an agent runs that vmsched holds elsewhere are found."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import AgentHeartbeat, Resources
from vmsched_contract.status import VmStatus
from vmsched_gateway.host_store import HostStore

OFFLINE = 15.0
LOST = 300.0
CAPACITY = Resources(cpu=16, memory_mb=65536, disk_gb=1000)


async def host_with_vm(
    engine: AsyncEngine, host_id: str, silent_for: float, *, status: str = "running", started: bool = True
) -> uuid.UUID:
    """A host last heard from ``silent_for`` seconds ago, holding one VM (2 vCPUs); the VM's id."""
    vm_id = uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            text(
                """
                INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, alloc_cpu, alloc_memory_mb, alloc_disk_gb,
                                   vm_count, last_heartbeat)
                VALUES (:id, 'online', 16, 65536, 1000, 2, 2048, 20, 1, now() - make_interval(secs => :silent))
                ON CONFLICT (id) DO UPDATE SET alloc_cpu = hosts.alloc_cpu + 2,
                    alloc_memory_mb = hosts.alloc_memory_mb + 2048, alloc_disk_gb = hosts.alloc_disk_gb + 20,
                    vm_count = hosts.vm_count + 1
                """
            ),
            {"id": host_id, "silent": silent_for},
        )
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb, scheduled_at, started_at) "
                "VALUES (:id, 'v', :status, :host, 2, 2048, 20, now(), CASE WHEN :started THEN now() END)"
            ),
            {"id": vm_id, "host": host_id, "status": status, "started": started},
        )
    return vm_id


async def status_of(engine: AsyncEngine, vm_id: uuid.UUID) -> str:
    async with engine.connect() as connection:
        status: str = await connection.scalar(text("SELECT status FROM vms WHERE id = :id"), {"id": vm_id})
    return status


async def allocation(engine: AsyncEngine, host_id: str) -> tuple[int, int]:
    async with engine.connect() as connection:
        row = (
            await connection.execute(text("SELECT alloc_cpu, vm_count FROM hosts WHERE id = :id"), {"id": host_id})
        ).one()
    return (row.alloc_cpu, row.vm_count)


async def test_a_silent_host_goes_offline_and_its_vms_unknown_keeping_their_capacity(
    private_engine: AsyncEngine,
) -> None:
    store = HostStore(private_engine)
    running = await host_with_vm(private_engine, "hv-s1", silent_for=20)
    scheduled = await host_with_vm(private_engine, "hv-s1", silent_for=20, status="scheduled", started=False)
    deleting = await host_with_vm(private_engine, "hv-s1", silent_for=20, status="deleting")
    alive = await host_with_vm(private_engine, "hv-s2", silent_for=1)

    check = await store.silence(OFFLINE)

    assert (check.offline, check.unknown, check.heard_any) == (["hv-s1"], 2, True)
    assert [await status_of(private_engine, vm) for vm in (running, scheduled, deleting, alive)] == [
        "unknown",
        "unknown",
        "deleting",
        "running",
    ]
    assert await allocation(private_engine, "hv-s1") == (6, 3)  # nothing given back


async def test_when_no_agent_at_all_is_heard_from_the_check_says_so(private_engine: AsyncEngine) -> None:
    store = HostStore(private_engine)
    await host_with_vm(private_engine, "hv-c1", silent_for=60)
    await host_with_vm(private_engine, "hv-c2", silent_for=60)
    check = await store.silence(OFFLINE)
    assert sorted(check.offline) == ["hv-c1", "hv-c2"]
    assert not check.heard_any


async def test_a_lost_host_fails_its_unknown_vms_deletes_its_deleting_ones_and_frees_their_capacity(
    private_engine: AsyncEngine,
) -> None:
    store = HostStore(private_engine)
    unknown = await host_with_vm(private_engine, "hv-l1", silent_for=400)
    deleting = await host_with_vm(private_engine, "hv-l1", silent_for=400, status="deleting")
    recent = await host_with_vm(private_engine, "hv-l2", silent_for=20)
    await store.silence(OFFLINE)

    changes = await store.lose(LOST, exclude_for=600)

    assert sorted((c.after.id, c.after.status) for c in changes) == sorted(
        [(unknown, VmStatus.FAILED), (deleting, VmStatus.DELETED)]
    )
    assert await status_of(private_engine, recent) == "unknown"  # silent, not yet lost
    assert await allocation(private_engine, "hv-l1") == (0, 0)
    failed = next(c.after for c in changes if c.after.id == unknown)
    assert "hv-l1" in failed.exclusions  # a restart goes elsewhere first
    assert failed.status_reason is not None
    assert "AGENT_LOST_TIMEOUT" in failed.status_reason
    assert await store.lose(LOST, exclude_for=600) == []  # once


async def test_a_returning_host_settles_its_unknown_vms_from_what_its_heartbeat_lists(
    private_engine: AsyncEngine,
) -> None:
    store = HostStore(private_engine)
    listed = await host_with_vm(private_engine, "hv-r1", silent_for=20)
    never_ran = await host_with_vm(private_engine, "hv-r1", silent_for=20, status="scheduled", started=False)
    lost_by_host = await host_with_vm(private_engine, "hv-r1", silent_for=20)
    await store.silence(OFFLINE)

    folded = await store.fold_heartbeats(
        [AgentHeartbeat(agent_id="hv-r1", capacity=CAPACITY, vm_ids=[listed])], takeover_after=OFFLINE
    )

    settled = {change.after.id: change.after.status for change in folded.returned}
    assert settled == {
        listed: VmStatus.RUNNING,
        never_ran: VmStatus.SCHEDULED,  # its create command is still to come
        lost_by_host: VmStatus.FAILED,  # it ran there, and the host came back without it
    }
    assert await allocation(private_engine, "hv-r1") == (4, 2)  # the lost one's share given back
    assert (
        await store.fold_heartbeats([AgentHeartbeat(agent_id="hv-r1", capacity=CAPACITY)], takeover_after=OFFLINE)
    ).returned == []


async def test_orphans_are_the_vms_an_agent_runs_that_postgresql_holds_elsewhere_or_not_at_all(
    private_engine: AsyncEngine,
) -> None:
    store = HostStore(private_engine)
    here = await host_with_vm(private_engine, "hv-p1", silent_for=1)  # running on hv-p1: not an orphan
    moved = await host_with_vm(private_engine, "hv-p2", silent_for=1)  # running on hv-p2, reported by hv-p1
    failed = await host_with_vm(private_engine, "hv-p3", silent_for=1)
    async with private_engine.begin() as connection:
        await connection.execute(text("UPDATE vms SET status = 'failed' WHERE id = :id"), {"id": failed})
    unmanaged = uuid.uuid4()  # a VM vmsched never placed: not ours to delete

    orphans = await store.orphans([("hv-p1", [here, moved, unmanaged]), ("hv-p3", [failed])])

    assert sorted((host, row.id) for host, row in orphans) == sorted([("hv-p1", moved), ("hv-p3", failed)])
    assert {row.name for _, row in orphans} == {"v"}  # enough for the delete command
