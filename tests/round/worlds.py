"""Where a scheduling round runs in these tests: in memory (the fakes) or on the real Redis and
PostgreSQL. Both answer the same questions, so every round test runs on both."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol
from uuid import UUID

from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.round.fakes import Host, MemoryFleet, MemoryLedger, MemorySnapshot, new_vm_record
from vmsched_contract.decision import PreemptionMove
from vmsched_contract.messages import ZERO, Capability, Overcommit, Resources, VmMigrate, VmToPlace
from vmsched_contract.status import VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_domain import live_migration
from vmsched_domain.claims import target_claim_id
from vmsched_domain.lifecycle import Event, choose
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import Change
from vmsched_pg import vm_writes
from vmsched_pg.rows import VM_COLUMNS, vm_from_row
from vmsched_placement import Fleet, Weights
from vmsched_redis.claims import Claim, OwnChange
from vmsched_redis.host_hash import HostWrite
from vmsched_redis.snapshot import Snapshot
from vmsched_scheduler.fleet_cache import FleetCache
from vmsched_scheduler.ledger import PostgresLedger
from vmsched_scheduler.ports import ClaimStore, FleetView, Ledger
from vmsched_scheduler.round import SchedulingRound
from vmsched_scheduler.round_items import RoundSettings

SETTINGS = RoundSettings(weights=Weights(), offline_timeout=15.0)


class FreezableFleet:
    """A fleet view that stops refreshing when frozen: what a scheduler sees when another one has
    changed the snapshot since it last read it; or only lags (a refresh skipped, as one that began
    a moment before a change is taken for it)."""

    def __init__(self, inner: FleetView) -> None:
        self.inner = inner
        self.frozen = False
        # Lagging: a refresh is skipped (as when another began a moment ago), but catching up reads.
        self.lagging = False

    @property
    def fleet(self) -> Fleet:
        return self.inner.fleet

    async def refresh(self, *, force_full: bool = False) -> None:
        if not self.frozen and not self.lagging:
            await self.inner.refresh(force_full=force_full)

    async def catch_up(self) -> bool:
        if self.frozen:
            return False
        return await self.inner.catch_up()

    async def reread(self, host_ids: Iterable[str]) -> None:
        await self.inner.reread(host_ids)

    def booked(self, changes: Mapping[str, OwnChange], *, on: Fleet) -> None:
        self.inner.booked(changes, on=on)


class World(Protocol):
    round: SchedulingRound
    view: FreezableFleet

    async def add_host(
        self,
        host_id: str,
        capacity: Resources,
        *,
        labels: dict[str, str] | None = None,
        allocated: Resources = ZERO,
        overcommit: Overcommit | None = None,
        reserved: Resources = ZERO,
        can_migrate: bool = True,
    ) -> None: ...

    async def add_vm(
        self,
        resources: Resources,
        *,
        name: str = "vm",
        labels: dict[str, str] | None = None,
        exclude: Sequence[str] = (),
        strategy: Strategy | None = None,
        priority: int = 0,
    ) -> VmToPlace:
        """A pending VM, and what vm.create carries for it."""
        ...

    async def vm(self, vm_id: UUID) -> VmRecord: ...

    async def add_running_vm(
        self,
        resources: Resources,
        host_id: str,
        *,
        name: str = "vm",
        labels: dict[str, str] | None = None,
        priority: int = 0,
    ) -> VmRecord:
        """A VM running on ``host_id``: its share counted there in PostgreSQL and claimed in the snapshot."""
        ...

    async def ask_migration(self, vm_id: UUID, target_host: str | None = None) -> VmMigrate:
        """What POST /v1/vms/{id}/migrate does to the VM (migrating, choosing its target), and its vm.migrate."""
        ...

    async def allocated(self, host_id: str) -> tuple[Resources, Resources]:
        """What PostgreSQL and what the snapshot count as allocated on the host."""
        ...

    async def claimed_on(self, vm_id: UUID) -> str | None: ...

    async def target_claimed_on(self, vm_id: UUID) -> str | None:
        """The host of the VM's target claim (a migration's), if it holds one."""
        ...

    async def take_behind_the_fleets_back(self, host_id: str, resources: Resources) -> None:
        """Another scheduler claims on the host, in the snapshot and in PostgreSQL."""
        ...

    async def set_paused(self, host_id: str, paused: bool) -> None:
        """As an operator's PATCH does: PostgreSQL and the snapshot at once."""
        ...

    async def pause_in_ledger_only(self, host_id: str) -> None:
        """An operator's pause that PostgreSQL has and the snapshot not yet."""
        ...

    async def claim_without_commit(self, vm_id: UUID, host_id: str, resources: Resources) -> None:
        """An earlier delivery's claim for the VM whose commit never happened (PostgreSQL was down)."""
        ...

    async def set_online_hosts(self, count: int) -> None:
        """Make PostgreSQL know ``count`` online hosts (as after a Redis flush)."""
        ...

    async def end_migration_in_ledger_only(self, vm_id: UUID) -> None:
        """The VM's migration ends in PostgreSQL (it runs on its target, its source given back) while
        the snapshot still holds both its claims: the gateway between its commit and its handing the
        claim over to the target."""
        ...

    async def keep_preemption(self, vm_id: UUID, host_id: str, victims: Sequence[UUID]) -> None:
        """Record that the pending VM had ``victims`` moved off ``host_id`` for it (``vms.preemption``)."""
        ...


def migration_ended(vm: VmRecord) -> Change:
    """The change that ends the VM's migration on its target (as the target's report does)."""
    transition = choose(Event.TARGET_RUNNING, vm.status)
    assert transition is not None, vm
    assert vm.migration_target is not None, vm
    after = replace(
        vm,
        status=transition.target,
        status_reason=None,
        hypervisor_id=vm.migration_target,
        task=None,
        task_since=None,
        target_host=None,
        migration_target=None,
    )
    return Change(vm, after, transition)


def preemption_kept(host_id: str, victims: Sequence[UUID]) -> dict[str, object]:
    return PreemptionMove(
        journal=None, host=host_id, victims=[str(v) for v in victims], decided_at=datetime.now(UTC)
    ).model_dump(mode="json")


def vm_to_place(
    resources: Resources,
    name: str,
    labels: dict[str, str] | None,
    exclude: Sequence[str],
    strategy: Strategy | None,
    priority: int = 0,
) -> VmToPlace:
    return VmToPlace(
        vm_id=uuid.uuid4(),
        name=name,
        resources=resources,
        labels=labels or {},
        exclude_hosts=list(exclude),
        strategy=strategy,
        priority=priority,
    )


@dataclass
class MemoryWorld:
    snapshot: MemorySnapshot
    ledger: MemoryLedger
    view: FreezableFleet
    round: SchedulingRound

    @classmethod
    def build(cls) -> MemoryWorld:
        snapshot, ledger = MemorySnapshot(), MemoryLedger()
        view = FreezableFleet(MemoryFleet(snapshot))
        return cls(snapshot, ledger, view, SchedulingRound(view, snapshot, ledger, SETTINGS))

    async def add_host(
        self,
        host_id: str,
        capacity: Resources,
        *,
        labels: dict[str, str] | None = None,
        allocated: Resources = ZERO,
        overcommit: Overcommit | None = None,
        reserved: Resources = ZERO,
        can_migrate: bool = True,
    ) -> None:
        for hosts in (self.snapshot.hosts, self.ledger.hosts):
            hosts[host_id] = Host(
                host_id,
                capacity,
                labels=dict(labels or {}),
                overcommit=overcommit or Overcommit(),
                reserved=reserved,
                allocated=allocated,
                heartbeat=time.time(),
                can_migrate=can_migrate,
            )

    async def add_vm(
        self,
        resources: Resources,
        *,
        name: str = "vm",
        labels: dict[str, str] | None = None,
        exclude: Sequence[str] = (),
        strategy: Strategy | None = None,
        priority: int = 0,
    ) -> VmToPlace:
        vm = vm_to_place(resources, name, labels, exclude, strategy, priority)
        self.ledger.vms[vm.vm_id] = replace(new_vm_record(vm.vm_id, name, resources), priority=priority)
        return vm

    async def vm(self, vm_id: UUID) -> VmRecord:
        return self.ledger.vms[vm_id]

    async def add_running_vm(
        self,
        resources: Resources,
        host_id: str,
        *,
        name: str = "vm",
        labels: dict[str, str] | None = None,
        priority: int = 0,
    ) -> VmRecord:
        vm = replace(
            new_vm_record(uuid.uuid4(), name, resources),
            status=VmStatus.RUNNING,
            hypervisor_id=host_id,
            labels=dict(labels or {}),
            priority=priority,
        )
        self.ledger.vms[vm.id] = vm
        (claimed,) = (await self.snapshot.claim_many([Claim(vm.id, host_id, resources)], time.time())).results
        assert claimed.outcome == "claimed", claimed
        host = self.ledger.hosts[host_id]
        host.allocated, host.vm_count = host.allocated.plus(resources), host.vm_count + 1
        return vm

    async def ask_migration(self, vm_id: UUID, target_host: str | None = None) -> VmMigrate:
        change = live_migration.requested(self.ledger.vms[vm_id], target_host, time.time())
        assert change is not None
        self.ledger.vms[vm_id] = change.after
        return live_migration.request_of(change.after, time.time())

    async def allocated(self, host_id: str) -> tuple[Resources, Resources]:
        return self.ledger.hosts[host_id].allocated, self.snapshot.hosts[host_id].allocated

    async def claimed_on(self, vm_id: UUID) -> str | None:
        held = self.snapshot.claims.get(str(vm_id))
        return None if held is None else held[0]

    async def target_claimed_on(self, vm_id: UUID) -> str | None:
        held = self.snapshot.claims.get(target_claim_id(vm_id))
        return None if held is None else held[0]

    async def claim_without_commit(self, vm_id: UUID, host_id: str, resources: Resources) -> None:
        (result,) = (await self.snapshot.claim_many([Claim(vm_id, host_id, resources)], time.time())).results
        assert result.outcome == "claimed"

    async def take_behind_the_fleets_back(self, host_id: str, resources: Resources) -> None:
        other = uuid.uuid4()
        (result,) = (await self.snapshot.claim_many([Claim(other, host_id, resources)], time.time())).results
        assert result.outcome == "claimed"
        host = self.ledger.hosts[host_id]
        host.allocated = Resources(
            cpu=host.allocated.cpu + resources.cpu,
            memory_mb=host.allocated.memory_mb + resources.memory_mb,
            disk_gb=host.allocated.disk_gb + resources.disk_gb,
            gpu=host.allocated.gpu + resources.gpu,
        )

    async def set_paused(self, host_id: str, paused: bool) -> None:
        self.ledger.hosts[host_id].paused = paused
        self.snapshot.hosts[host_id].paused = paused

    async def pause_in_ledger_only(self, host_id: str) -> None:
        self.ledger.hosts[host_id].paused = True

    async def set_online_hosts(self, count: int) -> None:
        for n in range(count):
            self.ledger.hosts.setdefault(f"pg-only-{n}", Host(f"pg-only-{n}", ZERO))

    async def end_migration_in_ledger_only(self, vm_id: UUID) -> None:
        change = migration_ended(self.ledger.vms[vm_id])
        self.ledger.vms[vm_id] = change.after
        assert change.released_from is not None
        source = self.ledger.hosts[change.released_from]
        source.allocated, source.vm_count = source.allocated.minus(change.before.resources), source.vm_count - 1

    async def keep_preemption(self, vm_id: UUID, host_id: str, victims: Sequence[UUID]) -> None:
        self.ledger.vms[vm_id] = replace(self.ledger.vms[vm_id], preemption=preemption_kept(host_id, victims))


@dataclass
class ServersWorld:
    engine: AsyncEngine
    snapshot: Snapshot
    view: FreezableFleet
    round: SchedulingRound

    @classmethod
    def build(cls, engine: AsyncEngine, redis: Redis, prefix: str) -> ServersWorld:
        snapshot = Snapshot(redis, prefix)
        view = FreezableFleet(FleetCache(snapshot))
        ledger = PostgresLedger(engine, default_strategy=Strategy.LEAST_LOADED)
        return cls(engine, snapshot, view, SchedulingRound(view, snapshot, ledger, SETTINGS))

    async def add_host(
        self,
        host_id: str,
        capacity: Resources,
        *,
        labels: dict[str, str] | None = None,
        allocated: Resources = ZERO,
        overcommit: Overcommit | None = None,
        reserved: Resources = ZERO,
        can_migrate: bool = True,
    ) -> None:
        ratios = overcommit or Overcommit()
        capabilities = [Capability.MIGRATE.value] if can_migrate else []
        async with self.engine.begin() as connection:
            await connection.execute(
                text(
                    """
                    INSERT INTO hosts (id, status, labels, cpu, memory_mb, disk_gb, gpu, cpu_ratio, memory_ratio,
                                       disk_ratio, reserved_cpu, reserved_memory_mb, reserved_disk_gb, reserved_gpu,
                                       alloc_cpu, alloc_memory_mb, alloc_disk_gb, alloc_gpu, last_heartbeat,
                                       capabilities)
                    VALUES (:id, 'online', CAST(:labels AS jsonb), :cpu, :memory_mb, :disk_gb, :gpu, :cpu_ratio,
                            :memory_ratio, :disk_ratio, :r_cpu, :r_memory_mb, :r_disk_gb, :r_gpu,
                            :a_cpu, :a_memory_mb, :a_disk_gb, :a_gpu, now(), CAST(:capabilities AS jsonb))
                    """
                ),
                {
                    "id": host_id,
                    "labels": json.dumps(labels or {}),
                    **capacity.model_dump(),
                    "cpu_ratio": ratios.cpu,
                    "memory_ratio": ratios.memory,
                    "disk_ratio": ratios.disk,
                    **{f"r_{k}": v for k, v in reserved.model_dump().items()},
                    **{f"a_{k}": v for k, v in allocated.model_dump().items()},
                    "capabilities": json.dumps(capabilities),
                },
            )
        await self.snapshot.record_heartbeats(
            [
                HostWrite(
                    host_id=host_id,
                    capacity=capacity,
                    overcommit=ratios,
                    reserved=reserved,
                    labels=labels or {},
                    status="online",
                    heartbeat_at=time.time(),
                    paused=False,
                    allocated=allocated,
                    vm_count=0,
                    capabilities=capabilities,
                )
            ],
            bump_interval=5.0,
        )

    async def add_vm(
        self,
        resources: Resources,
        *,
        name: str = "vm",
        labels: dict[str, str] | None = None,
        exclude: Sequence[str] = (),
        strategy: Strategy | None = None,
        priority: int = 0,
    ) -> VmToPlace:
        vm = vm_to_place(resources, name, labels, exclude, strategy, priority)
        async with self.engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, cpu, memory_mb, disk_gb, gpu, priority) "
                    "VALUES (:id, :name, 'pending', :cpu, :memory_mb, :disk_gb, :gpu, :priority)"
                ),
                {"id": vm.vm_id, "name": name, "priority": priority, **resources.model_dump()},
            )
        return vm

    async def vm(self, vm_id: UUID) -> VmRecord:
        async with self.engine.connect() as connection:
            row = (await connection.execute(text(f"SELECT {VM_COLUMNS} FROM vms WHERE id = :id"), {"id": vm_id})).one()
        return vm_from_row(row)

    async def add_running_vm(
        self,
        resources: Resources,
        host_id: str,
        *,
        name: str = "vm",
        labels: dict[str, str] | None = None,
        priority: int = 0,
    ) -> VmRecord:
        vm_id = uuid.uuid4()
        async with self.engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, hypervisor_id, labels, cpu, memory_mb, disk_gb, gpu, priority) "
                    "VALUES (:id, :name, 'running', :host, CAST(:labels AS jsonb), :cpu, :memory_mb, :disk_gb, :gpu, "
                    ":priority)"
                ),
                {
                    "id": vm_id,
                    "name": name,
                    "host": host_id,
                    "priority": priority,
                    "labels": json.dumps(labels or {}),
                    **resources.model_dump(),
                },
            )
            await connection.execute(
                text(
                    "UPDATE hosts SET alloc_cpu = alloc_cpu + :cpu, alloc_memory_mb = alloc_memory_mb + :memory_mb, "
                    "alloc_disk_gb = alloc_disk_gb + :disk_gb, alloc_gpu = alloc_gpu + :gpu, "
                    "vm_count = vm_count + 1 WHERE id = :id"
                ),
                {"id": host_id, **resources.model_dump()},
            )
        (claimed,) = (await self.snapshot.claim_many([Claim(vm_id, host_id, resources)], time.time())).results
        assert claimed.outcome == "claimed", claimed
        return await self.vm(vm_id)

    async def ask_migration(self, vm_id: UUID, target_host: str | None = None) -> VmMigrate:
        async with self.engine.begin() as connection:
            row = (await connection.execute(vm_writes.LOCK_VMS, {"ids": [vm_id]})).one()
            change = live_migration.requested(vm_from_row(row), target_host, time.time())
            assert change is not None
            await vm_writes.apply(connection, [change])
        return live_migration.request_of(change.after, time.time())

    async def allocated(self, host_id: str) -> tuple[Resources, Resources]:
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(
                    text("SELECT alloc_cpu, alloc_memory_mb, alloc_disk_gb, alloc_gpu FROM hosts WHERE id = :id"),
                    {"id": host_id},
                )
            ).one()
        in_pg = Resources(cpu=row[0], memory_mb=row[1], disk_gb=row[2], gpu=row[3])
        record = (await self.snapshot.read_hosts([host_id]))[host_id]
        assert record is not None
        return in_pg, record.allocated

    async def claimed_on(self, vm_id: UUID) -> str | None:
        return await self.snapshot.claim_of(vm_id)

    async def target_claimed_on(self, vm_id: UUID) -> str | None:
        return await self.snapshot.claim_of(target_claim_id(vm_id))

    async def claim_without_commit(self, vm_id: UUID, host_id: str, resources: Resources) -> None:
        (result,) = (await self.snapshot.claim_many([Claim(vm_id, host_id, resources)], time.time())).results
        assert result.outcome == "claimed"

    async def take_behind_the_fleets_back(self, host_id: str, resources: Resources) -> None:
        (result,) = (await self.snapshot.claim_many([Claim(uuid.uuid4(), host_id, resources)], time.time())).results
        assert result.outcome == "claimed"
        async with self.engine.begin() as connection:
            await connection.execute(
                text(
                    "UPDATE hosts SET alloc_cpu = alloc_cpu + :cpu, alloc_memory_mb = alloc_memory_mb + :memory_mb, "
                    "alloc_disk_gb = alloc_disk_gb + :disk_gb, alloc_gpu = alloc_gpu + :gpu WHERE id = :id"
                ),
                {"id": host_id, **resources.model_dump()},
            )

    async def set_paused(self, host_id: str, paused: bool) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(
                text("UPDATE hosts SET scheduling_paused = :paused WHERE id = :id"), {"id": host_id, "paused": paused}
            )
        await self.snapshot.set_host_fields(host_id, {"paused": "1" if paused else "0"})

    async def pause_in_ledger_only(self, host_id: str) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(text("UPDATE hosts SET scheduling_paused = true WHERE id = :id"), {"id": host_id})

    async def set_online_hosts(self, count: int) -> None:
        async with self.engine.begin() as connection:
            for n in range(count):
                await connection.execute(
                    text(
                        "INSERT INTO hosts (id, status, cpu, memory_mb, disk_gb, last_heartbeat) "
                        "VALUES (:id, 'online', 1, 1, 1, now())"
                    ),
                    {"id": f"pg-only-{n}"},
                )

    async def end_migration_in_ledger_only(self, vm_id: UUID) -> None:
        async with self.engine.begin() as connection:
            row = (await connection.execute(vm_writes.LOCK_VMS, {"ids": [vm_id]})).one()
            assert await vm_writes.apply(connection, [migration_ended(vm_from_row(row))])

    async def keep_preemption(self, vm_id: UUID, host_id: str, victims: Sequence[UUID]) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(
                text("UPDATE vms SET preemption = CAST(:kept AS jsonb) WHERE id = :id"),
                {"id": vm_id, "kept": json.dumps(preemption_kept(host_id, victims))},
            )


def ledger_of(world: World) -> Ledger:
    return world.round.ledger


def claims_of(world: World) -> ClaimStore:
    return world.round.claims


__all__ = ["MemoryWorld", "ServersWorld", "VmStatus", "World"]
