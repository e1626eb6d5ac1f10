"""The gateway's host writes on the real PostgreSQL: silent hosts go offline and their VMs unknown
(nothing failed); hosts lost for good have their VMs failed and capacity freed; a host that comes back
settles its unknown VMs from its heartbeat; VMs an agent runs that vmsched holds elsewhere are found."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.fencing import FencedBy
from vmsched_contract.messages import AgentHeartbeat, Resources
from vmsched_contract.status import VmStatus
from vmsched_domain.vm_changes import CLOCK_SKEW
from vmsched_gateway.host_store import HostStore
from vmsched_pg.fences import FenceStore, NotFenced

OFFLINE = 15.0
LOST = 300.0
CAPACITY = Resources(cpu=16, memory_mb=65536, disk_gb=1000)


async def host_with_vm(
    engine: AsyncEngine,
    host_id: str,
    silent_for: float,
    *,
    status: str = "running",
    started: bool = True,
    started_ago: float = 60.0,
) -> uuid.UUID:
    """A host last heard from ``silent_for`` seconds ago, holding one VM (2 vCPUs, started
    ``started_ago`` seconds ago unless not ``started``); the VM's id."""
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
                "VALUES (:id, 'v', :status, :host, 2, 2048, 20, now(), "
                "CASE WHEN :started THEN now() - make_interval(secs => :ago) END)"
            ),
            {"id": vm_id, "host": host_id, "status": status, "started": started, "ago": started_ago},
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

    lost = await store.lost_hosts(LOST)
    assert [(host.host_id, host.fenced, host.tried) for host in lost] == [("hv-l1", False, False)]
    changes = await store.lose(LOST, hosts=["hv-l1", "hv-l2"], exclude_for=600)

    assert sorted((c.after.id, c.after.status) for c in changes) == sorted(
        [(unknown, VmStatus.FAILED), (deleting, VmStatus.DELETED)]
    )
    assert await status_of(private_engine, recent) == "unknown"  # silent, not yet lost
    assert await allocation(private_engine, "hv-l1") == (0, 0)
    failed = next(c.after for c in changes if c.after.id == unknown)
    assert "hv-l1" in failed.exclusions  # a restart goes elsewhere first
    assert failed.status_reason is not None
    assert "AGENT_LOST_TIMEOUT" in failed.status_reason
    assert await store.lose(LOST, hosts=["hv-l1"], exclude_for=600) == []  # once
    assert await store.lost_hosts(LOST) == []


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


async def test_a_heartbeat_taken_before_a_vm_started_does_not_fail_it(private_engine: AsyncEngine) -> None:
    # A heartbeat that waited in a backlog (the gateway behind, the host marked offline meanwhile)
    # lists what the host ran when the agent took it: a VM that started since is not in it.
    store = HostStore(private_engine)
    started_since = await host_with_vm(private_engine, "hv-b1", silent_for=20, started_ago=10)
    await store.silence(OFFLINE)
    stale = AgentHeartbeat(agent_id="hv-b1", capacity=CAPACITY, sent_at=datetime.now(UTC) - timedelta(seconds=30))

    assert (await store.fold_heartbeats([stale], takeover_after=OFFLINE)).returned == []
    assert await status_of(private_engine, started_since) == "unknown"  # for the next heartbeat to settle
    fresh = await store.fold_heartbeats([AgentHeartbeat(agent_id="hv-b1", capacity=CAPACITY)], takeover_after=OFFLINE)
    assert {change.after.id: change.after.status for change in fresh.returned} == {started_since: VmStatus.FAILED}


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

    later = datetime.now(UTC) + timedelta(seconds=5)  # heartbeats taken after every change above

    orphans = await store.orphans([("hv-p1", later, [here, moved, unmanaged]), ("hv-p3", later, [failed])])

    assert sorted((host, row.id) for host, row in orphans) == sorted([("hv-p1", moved), ("hv-p3", failed)])
    assert {row.name for _, row in orphans} == {"v"}  # enough for the delete command


async def test_a_heartbeat_taken_before_a_vm_changed_says_nothing_of_it(private_engine: AsyncEngine) -> None:
    """A heartbeat that waited in a backlog while the VM's delete was reported still lists the VM:
    not an orphan (it would be reported, or deleted as the policy says, for nothing). The host's next
    heartbeat, taken after the delete, says whether the VM is still there."""
    store = HostStore(private_engine)
    vm = await host_with_vm(private_engine, "hv-o1", silent_for=1)
    taken_before = datetime.now(UTC)
    async with private_engine.begin() as connection:
        await connection.execute(
            text("UPDATE vms SET status = 'deleted', updated_at = now() WHERE id = :id"), {"id": vm}
        )

    assert await store.orphans([("hv-o1", taken_before, [vm])]) == []
    assert await store.orphans([("hv-o1", datetime.now(UTC), [vm])]) == []  # within the clocks' skew
    taken_after = datetime.now(UTC) + timedelta(seconds=CLOCK_SKEW + 1)
    assert [(host, row.id) for host, row in await store.orphans([("hv-o1", taken_after, [vm])])] == [("hv-o1", vm)]


async def test_a_fenced_host_has_every_vm_it_holds_failed_at_once_and_stays_fenced_when_its_agent_is_back(
    private_engine: AsyncEngine,
) -> None:
    store = HostStore(private_engine)
    fences = FenceStore(private_engine)
    running = await host_with_vm(private_engine, "hv-f1", silent_for=1)  # heard from a second ago
    stopped = await host_with_vm(private_engine, "hv-f1", silent_for=1, status="stopped")
    elsewhere = await host_with_vm(private_engine, "hv-f2", silent_for=1)

    fenced = await fences.fence("hv-f1", FencedBy.OPERATOR)
    assert fenced is not None
    assert (fenced.newly, fenced.host.status, fenced.host.fenced_by) == (True, "fenced", "operator")
    again = await fences.fence("hv-f1", FencedBy.COMMAND)
    assert again is not None
    assert (again.newly, again.host.fenced_by) == (False, "operator")  # nothing changed
    assert await fences.fence("hv-nowhere", FencedBy.OPERATOR) is None

    changes = await store.fail_fenced(exclude_for=600)
    assert sorted(str(c.after.id) for c in changes) == sorted([str(running), str(stopped)])
    assert {c.after.status for c in changes} == {VmStatus.FAILED}
    assert await status_of(private_engine, elsewhere) == "running"
    assert await allocation(private_engine, "hv-f1") == (0, 0)
    assert await store.fail_fenced(exclude_for=600) == []  # once

    # Its agent heartbeats again, still running the VM: the host stays fenced, the VM is an orphan.
    folded = await store.fold_heartbeats(
        [AgentHeartbeat(agent_id="hv-f1", capacity=CAPACITY, vm_ids=[running])], takeover_after=OFFLINE
    )
    assert [(host.host_id, host.fenced) for host in folded.hosts] == [("hv-f1", True)]
    assert folded.returned == []
    next_beat = datetime.now(UTC) + timedelta(seconds=10)
    assert [(host, vm.id) for host, vm in await store.orphans([("hv-f1", next_beat, [running])])] == [
        ("hv-f1", running)
    ]
    async with private_engine.connect() as connection:
        assert await connection.scalar(text("SELECT status FROM hosts WHERE id = 'hv-f1'")) == "fenced"
    # Nor does a silence make it offline: it stays fenced until an operator unfences it.
    await store.silence(0.0001)
    unfenced = await fences.unfence("hv-f1", offline_after=OFFLINE)
    assert unfenced is not None
    assert (unfenced.fenced_at, unfenced.fenced_by) == (None, None)
    with pytest.raises(NotFenced):
        await fences.unfence("hv-f1", offline_after=OFFLINE)


async def test_a_lost_host_is_claimed_for_fencing_once_per_silence(private_engine: AsyncEngine) -> None:
    store = HostStore(private_engine)
    fences = FenceStore(private_engine)
    await host_with_vm(private_engine, "hv-t1", silent_for=400)
    await store.silence(OFFLINE)
    assert await fences.claim_try("hv-t1")
    assert not await fences.claim_try("hv-t1")  # another replica, or the next round: not again
    assert [(h.host_id, h.tried) for h in await store.lost_hosts(LOST)] == [("hv-t1", True)]
    await store.fold_heartbeats([AgentHeartbeat(agent_id="hv-t1", capacity=CAPACITY)], takeover_after=OFFLINE)
    async with private_engine.begin() as connection:  # silent again, for long
        await connection.execute(text("UPDATE hosts SET last_heartbeat = now() - interval '400 seconds'"))
    await store.silence(OFFLINE)
    assert await fences.claim_try("hv-t1")  # a new silence: the command may run again


async def test_a_failed_fence_is_tried_again_once_its_backoff_passed_and_the_next_silence_counts_afresh(
    private_engine: AsyncEngine,
) -> None:
    store = HostStore(private_engine)
    fences = FenceStore(private_engine)
    await host_with_vm(private_engine, "hv-r1", silent_for=400)
    await store.silence(OFFLINE)

    async def due() -> list[tuple[str, bool, bool]]:
        return [(h.host_id, h.tried, h.retry_due) for h in await store.lost_hosts(LOST)]

    assert await fences.claim_try("hv-r1", lease=3600) == 1
    assert await fences.claim_try("hv-r1", lease=3600) is None  # running: another replica waits
    assert await due() == [("hv-r1", True, False)]
    next_try = await fences.record_failure("hv-r1", 1, "BMC unreachable", retry_after=3600)
    assert next_try is not None
    assert await fences.claim_try("hv-r1", lease=3600) is None  # not before its backoff passed
    assert await fences.record_failure("hv-r1", 1, "BMC unreachable", retry_after=0) is not None
    assert await due() == [("hv-r1", True, True)]  # kept with the host: a restarted gateway sees it too
    assert await fences.claim_try("hv-r1", lease=3600) == 2
    assert await fences.record_failure("hv-r1", 1, "late", retry_after=0) is None  # an older try's: ignored

    # A gateway that died in the middle of a try recorded nothing: the lease makes the next one due.
    async with private_engine.begin() as connection:
        await connection.execute(text("UPDATE hosts SET fence_retry_at = now() WHERE id = 'hv-r1'"))
    assert await fences.claim_try("hv-r1", lease=3600) == 3

    # Fenced, nothing is tried again; a new silence after it is back counts from 1.
    assert await fences.fence("hv-r1", FencedBy.OPERATOR) is not None
    async with private_engine.begin() as connection:
        await connection.execute(text("UPDATE hosts SET fence_retry_at = now() WHERE id = 'hv-r1'"))
    assert await fences.claim_try("hv-r1", lease=3600) is None
    await fences.unfence("hv-r1", offline_after=OFFLINE)
    await store.silence(OFFLINE)
    assert await fences.claim_try("hv-r1", lease=3600) == 1

    # fence_needed (no lease) is announced once per silence, whatever time passes.
    await host_with_vm(private_engine, "hv-r2", silent_for=400)
    await store.silence(OFFLINE)
    assert await fences.claim_try("hv-r2") == 1
    assert await fences.claim_try("hv-r2") is None
    assert [t for t in await due() if t[0] == "hv-r2"] == [("hv-r2", True, False)]
