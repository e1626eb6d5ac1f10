"""In-memory stand-ins for the round's ports: Redis's claims and PostgreSQL's ledger, with the same
rules (the fit rule, the gates, keyed claims, the guarded prefix per host) and no server."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from uuid import UUID

from vmsched_contract.messages import ZERO, Capability, Overcommit, Resources, RestartPolicy
from vmsched_contract.status import VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_domain.fit import fits, shortfalls
from vmsched_domain.lifecycle import Event, sources
from vmsched_domain.live_migration import no_target, target_claimed
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import preempted
from vmsched_placement import Fleet
from vmsched_placement.inputs import demand_of
from vmsched_placement.preemption import Resident
from vmsched_redis.claims import Claim, Claimed, ClaimResult, OwnChange
from vmsched_redis.engine_inputs import to_host_state
from vmsched_redis.host_hash import SnapshotHost
from vmsched_scheduler.ports import (
    Committed,
    MigrationSettlement,
    NoHost,
    NoTarget,
    Placement,
    PlacementResult,
    Settlement,
    SlotTaken,
    TargetClaim,
)

PREEMPTIBLE = {VmStatus(status) for status in sources(Event.PREEMPTED)}


@dataclass
class Host:
    """One host, as both stores hold it (their copies can be made to disagree)."""

    id: str
    capacity: Resources
    labels: dict[str, str] = field(default_factory=dict)
    overcommit: Overcommit = field(default_factory=Overcommit)
    reserved: Resources = ZERO
    allocated: Resources = ZERO
    vm_count: int = 0
    status: str = "online"
    paused: bool = False
    heartbeat: float = 0.0
    can_migrate: bool = True


def _plus(a: Resources, b: Resources, sign: int = 1) -> Resources:
    return a.plus(b) if sign > 0 else a.minus(b)


class MemorySnapshot:
    """The Redis side: host hashes, claims keyed by claim id (a VM's id, or its target claim id),
    the round-robin cursor."""

    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}
        self.claims: dict[str, tuple[str, Resources]] = {}
        self.cursor = 0

    async def claim_many(self, claims: Sequence[Claim], now: float, *, all_or_nothing: bool = False) -> Claimed:
        if not all_or_nothing:
            return Claimed(self._claim_each(claims), {})
        # Every claim made on the real hosts, all undone if one fails: what the script's check-first
        # pass decides, by another route.
        saved = {host_id: (host.allocated, host.vm_count) for host_id, host in self.hosts.items()}
        claimed_before = dict(self.claims)
        results = self._claim_each(claims)
        if all(r.holds for r in results):
            return Claimed(results, {})
        for host_id, (allocated, vm_count) in saved.items():
            self.hosts[host_id].allocated, self.hosts[host_id].vm_count = allocated, vm_count
        self.claims = claimed_before
        return Claimed([ClaimResult("gang", "") if r.outcome == "claimed" else r for r in results], {})

    def _claim_each(self, claims: Sequence[Claim]) -> list[ClaimResult]:
        results = []
        for claim in claims:
            held = self.claims.get(claim.claim_id)
            if held is not None:
                results.append(ClaimResult("held", held[0]))
                continue
            host = self.hosts.get(claim.host_id)
            if host is None:
                results.append(ClaimResult("unknown_host", ""))
            elif host.status != "online":
                results.append(ClaimResult("offline", host.status))
            elif host.paused:
                results.append(ClaimResult("paused", ""))
            elif missing := shortfalls(claim.resources, host.capacity, host.reserved, host.overcommit, host.allocated):
                results.append(ClaimResult("insufficient", missing[0].resource))
            else:
                host.allocated = _plus(host.allocated, claim.resources)
                host.vm_count += 1
                self.claims[claim.claim_id] = (claim.host_id, claim.resources)
                results.append(ClaimResult("claimed", claim.host_id))
        return results

    async def release_many(self, claim_ids: Sequence[UUID | str]) -> list[str | None]:
        hosts: list[str | None] = []
        for claim_id in claim_ids:
            held = self.claims.pop(str(claim_id), None)
            if held is None:
                hosts.append(None)
                continue
            host = self.hosts[held[0]]
            host.allocated = _plus(host.allocated, held[1], -1)
            host.vm_count -= 1
            hosts.append(held[0])
        return hosts

    async def preempt(self, claim: Claim, victims: Sequence[UUID], now: float) -> Claimed:
        held = self.claims.get(claim.claim_id)
        if held is not None:
            return Claimed([ClaimResult("held", held[0])], {})
        host = self.hosts[claim.host_id]
        freed = host.allocated
        for victim in victims:
            victim_claim = self.claims.get(str(victim))
            if victim_claim is None or victim_claim[0] != claim.host_id:
                return Claimed([ClaimResult("victim_moved", str(victim))], {})
            freed = _plus(freed, victim_claim[1], -1)
        if missing := shortfalls(claim.resources, host.capacity, host.reserved, host.overcommit, freed):
            return Claimed([ClaimResult("insufficient", missing[0].resource)], {})
        await self.release_many(victims)
        return Claimed(self._claim_each([claim]), {})

    async def hosts_held(self, claim_ids: Sequence[UUID]) -> dict[UUID, str]:
        return {claim_id: self.claims[str(claim_id)][0] for claim_id in claim_ids if str(claim_id) in self.claims}

    async def next_round_robin(self, count: int = 1) -> int:
        first = self.cursor + 1
        self.cursor += count
        return first

    def record(self, host: Host) -> SnapshotHost:
        return SnapshotHost(
            id=host.id,
            status=host.status,
            labels=dict(host.labels),
            capacity=host.capacity,
            reserved=host.reserved,
            overcommit=host.overcommit,
            allocated=host.allocated,
            vm_count=host.vm_count,
            scheduling_paused=host.paused,
            last_heartbeat=host.heartbeat,
            synced=True,
            capabilities=(Capability.MIGRATE.value,) if host.can_migrate else (),
        )


class MemoryFleet:
    """The engine's copy of :class:`MemorySnapshot`, read whole on refresh."""

    def __init__(self, snapshot: MemorySnapshot) -> None:
        self.snapshot = snapshot
        self.fleet = Fleet.from_hosts([])
        self._seen: list[SnapshotHost] = []

    async def refresh(self, *, force_full: bool = False) -> None:
        self._seen = [self.snapshot.record(h) for h in self.snapshot.hosts.values()]
        self.fleet = Fleet.from_hosts(to_host_state(record) for record in self._seen)

    async def catch_up(self) -> bool:
        seen = self._seen
        await self.refresh()
        return self._seen != seen

    def booked(self, changes: Mapping[str, OwnChange], *, on: Fleet) -> None:
        """Nothing to skip: :meth:`refresh` reads every host anyway."""

    async def reread(self, host_ids: Iterable[str]) -> None:
        for host_id in host_ids:
            host = self.snapshot.hosts.get(host_id)
            if host is None:
                self.fleet.remove(host_id)
            else:
                self.fleet.upsert(to_host_state(self.snapshot.record(host)))


class MemoryLedger:
    """The PostgreSQL side: VM rows and host rows, settled under the same guard."""

    def __init__(self, default: Strategy = Strategy.LEAST_LOADED) -> None:
        self.vms: dict[UUID, VmRecord] = {}
        self.hosts: dict[str, Host] = {}
        self.default = default
        self._clock = itertools.count(1)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(1_700_000_000 + next(self._clock), UTC)

    async def default_strategy(self) -> Strategy:
        return self.default

    async def online_hosts(self) -> int:
        return sum(1 for h in self.hosts.values() if h.status == "online" and not h.paused)

    async def settle(
        self, placements: Sequence[Placement], no_hosts: Sequence[NoHost], *, all_or_nothing: bool = False
    ) -> Settlement:
        before = (dict(self.vms), {h: (host.allocated, host.vm_count) for h, host in self.hosts.items()})
        results: list[PlacementResult] = []
        refused_hosts: set[str] = set()
        for placement in placements:
            vm = self.vms.get(placement.vm_id)
            if vm is None or vm.status is not VmStatus.PENDING or vm.attempt != placement.attempt:
                results.append(PlacementResult(Committed.NOT_PENDING))
                continue
            host = self.hosts[placement.host_id]
            room = (
                placement.host_id not in refused_hosts
                and host.status == "online"
                and not host.paused
                and fits(placement.resources, host.capacity, host.reserved, host.overcommit, host.allocated)
            )
            if not room:  # the rest of this host's placements are refused too (a guarded prefix)
                refused_hosts.add(placement.host_id)
                results.append(PlacementResult(Committed.HOST_REFUSED))
                continue
            host.allocated = _plus(host.allocated, placement.resources)
            host.vm_count += 1
            at = self._now()
            self.vms[vm.id] = replace(
                vm,
                status=VmStatus.SCHEDULED,
                hypervisor_id=placement.host_id,
                strategy=placement.strategy,
                scheduled_at=at,
                placement=placement.record.model_dump(mode="json"),
            )
            results.append(PlacementResult(Committed.PLACED, at, vm.created_at))
        if all_or_nothing and any(r.outcome is Committed.HOST_REFUSED for r in results):
            self.vms = before[0]
            for host_id, (allocated, vm_count) in before[1].items():
                self.hosts[host_id].allocated, self.hosts[host_id].vm_count = allocated, vm_count
            results = [
                r if r.outcome is not Committed.PLACED else PlacementResult(Committed.GANG_REFUSED) for r in results
            ]
        recorded = []
        waiting: dict[UUID, datetime] = {}
        for no_host in no_hosts:
            vm = self.vms.get(no_host.vm_id)
            if vm is None or vm.status is not VmStatus.PENDING or vm.attempt != no_host.attempt:
                recorded.append(Committed.NOT_PENDING)
                continue
            may_wait = vm.wait_until is not None and vm.wait_until > datetime.now(UTC)
            if may_wait:
                assert vm.wait_until is not None
                waiting[vm.id] = vm.wait_until
            self.vms[vm.id] = replace(
                vm,
                status=VmStatus.WAITING if may_wait else VmStatus.UNSCHEDULABLE,
                status_reason=no_host.reason,
                strategy=no_host.strategy,
                placement=no_host.record.model_dump(mode="json"),
            )
            recorded.append(Committed.WAITING if may_wait else Committed.UNSCHEDULABLE)
        return Settlement(results, recorded, waiting)

    async def load(self, vm_ids: Sequence[UUID]) -> Mapping[UUID, VmRecord]:
        return {vm_id: self.vms[vm_id] for vm_id in vm_ids if vm_id in self.vms}

    async def residents(self, host_ids: Sequence[str], below: int) -> Mapping[str, list[Resident]]:
        found: dict[str, list[Resident]] = {}
        for vm in self.vms.values():
            if (
                vm.hypervisor_id is not None
                and vm.hypervisor_id in host_ids
                and vm.status in PREEMPTIBLE
                and vm.priority < below
            ):
                found.setdefault(vm.hypervisor_id, []).append(
                    Resident(str(vm.id), vm.priority, demand_of(vm.resources))
                )
        return found

    async def settle_preemption(
        self, placement: Placement, victims: Sequence[UUID], priority: int
    ) -> tuple[PlacementResult, list[VmRecord]]:
        vm = self.vms.get(placement.vm_id)
        if vm is None or vm.status is not VmStatus.PENDING or vm.attempt != placement.attempt:
            return PlacementResult(Committed.NOT_PENDING), []
        changes = []
        for victim_id in victims:
            victim = self.vms.get(victim_id)
            change = preempted(victim, vm, priority) if victim is not None and victim.priority < priority else None
            if change is None or change.before.hypervisor_id != placement.host_id:
                return PlacementResult(Committed.VICTIM_MOVED), []
            changes.append(change)
        host = self.hosts[placement.host_id]
        freed = host.allocated
        for change in changes:
            freed = _plus(freed, change.before.resources, -1)
        if not fits(placement.resources, host.capacity, host.reserved, host.overcommit, freed):
            return PlacementResult(Committed.HOST_REFUSED), []
        for change in changes:
            self.vms[change.after.id] = change.after
        host.allocated, host.vm_count = freed, host.vm_count - len(changes)
        settled = await self.settle([placement], [])
        return settled.placements[0], [change.after for change in changes]

    async def settle_migrations(
        self, targets: Sequence[TargetClaim], no_targets: Sequence[NoTarget]
    ) -> MigrationSettlement:
        placed: list[Committed] = []
        for target in targets:
            vm = self.vms.get(target.vm_id)
            change = None if vm is None else target_claimed(vm, target.migration, target.host_id)
            if change is None:
                placed.append(Committed.NOT_PENDING)
                continue
            host = self.hosts[target.host_id]
            room = (
                host.status == "online"
                and not host.paused
                and host.can_migrate
                and fits(target.resources, host.capacity, host.reserved, host.overcommit, host.allocated)
            )
            if not room:
                placed.append(Committed.HOST_REFUSED)
                continue
            host.allocated = _plus(host.allocated, target.resources)
            host.vm_count += 1
            self.vms[change.after.id] = replace(change.after, placement=target.record.model_dump(mode="json"))
            placed.append(Committed.PLACED)
        ended: list[Committed] = []
        for item in no_targets:
            vm = self.vms.get(item.vm_id)
            change = None if vm is None else no_target(vm, item.migration, item.reason, item.detail)
            if change is None:
                ended.append(Committed.NOT_PENDING)
                continue
            self.vms[change.after.id] = replace(change.after, placement=item.record.model_dump(mode="json"))
            ended.append(Committed.NO_TARGET)
        return MigrationSettlement(placed, ended)

    async def take_slot(self, placement: Placement, reservation: UUID, project: str) -> SlotTaken:
        """No reservations here: they are proven on the real servers (tests/integration/test_reservations.py)."""
        return SlotTaken(Committed.NO_SLOT, why=f"no reservation {reservation}")


def new_vm_record(vm_id: UUID, name: str, resources: Resources, *, attempt: int = 1) -> VmRecord:
    return VmRecord(
        id=vm_id,
        name=name,
        status=VmStatus.PENDING,
        status_reason=None,
        hypervisor_id=None,
        resources=resources,
        labels={},
        strategy=None,
        restart_policy=RestartPolicy.NEVER,
        restart_count=0,
        attempt=attempt,
        failures=0,
        exclusions={},
        attempts=[],
        placement=None,
        created_at=datetime.fromtimestamp(1_700_000_000, UTC),
        scheduled_at=None,
        started_at=None,
        failed_at=None,
    )
