"""What a scheduling round needs from the world, as protocols: the round is written against these
only, so it runs on in-memory fakes in a unit test and on Redis and PostgreSQL in production.

- :class:`FleetView`: the engine's copy of the capacity snapshot (Redis, in ``fleet_cache``).
- :class:`ClaimStore`: the atomic claims (Redis, ``vmsched_redis.snapshot.Snapshot``).
- :class:`Ledger`: the truth (PostgreSQL, ``ledger``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from uuid import UUID

from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import Resources
from vmsched_contract.strategy import Strategy
from vmsched_domain.records import VmRecord
from vmsched_domain.storage import NO_VOLUMES, VolumePlacement
from vmsched_placement import Fleet
from vmsched_placement.preemption import Resident
from vmsched_redis.claims import Claim, Claimed, GroupClaim, OwnChange


class FleetView(Protocol):
    @property
    def fleet(self) -> Fleet:
        """The hosts as last read; the round books its own placements on it as it goes."""
        ...

    async def refresh(self, *, force_full: bool = False) -> None:
        """Bring :attr:`fleet` up to date (cheaply: only what changed since the last refresh)."""
        ...

    async def catch_up(self) -> bool:
        """Read what changed since the last refresh now, however recent that was; whether anything
        did (besides this process's own claims)."""
        ...

    async def reread(self, host_ids: Iterable[str]) -> None:
        """Read these hosts again: a claim proved the copy of them stale."""
        ...

    def booked(self, changes: Mapping[str, OwnChange], *, on: Fleet) -> None:
        """Claims the round booked on ``on`` (:attr:`fleet` when it decided) as well: a refresh need
        not read those hosts, unless :attr:`fleet` was replaced meanwhile."""
        ...


class ClaimStore(Protocol):
    async def claim_many(self, claims: Sequence[Claim], now: float, *, all_or_nothing: bool = False) -> Claimed:
        """Check the fit rule and reserve, for each claim in order, atomically; keyed by VM id. With
        ``all_or_nothing``, nothing is reserved unless every claim fits (the others: ``gang``)."""
        ...

    async def release_many(self, claim_ids: Sequence[UUID | str]) -> list[str | None]:
        """Free each claim (a VM's id, or a migrating VM's target claim id)."""
        ...

    async def preempt(self, claim: Claim, victims: Sequence[UUID], now: float) -> Claimed:
        """Claim as if ``victims`` (claimed on ``claim.host_id``) were gone; if it fits, release their
        claims and reserve, in one atomic step (``victim_moved`` when one holds no claim there)."""
        ...

    async def next_round_robin(self, count: int = 1) -> int:
        """The first of ``count`` consecutive values of the cursor every replica shares."""
        ...

    async def hosts_held(self, claim_ids: Sequence[UUID]) -> dict[UUID, str]:
        """The host each of ``claim_ids`` holds a claim on, for those that hold one."""
        ...


@dataclass(frozen=True, slots=True)
class Placement:
    """Commit ``vm_id`` (at ``attempt``) to ``host_id``: pending -> scheduled, under the host's guard."""

    vm_id: UUID
    attempt: int
    host_id: str
    resources: Resources
    strategy: Strategy
    record: PlacementRecord
    group: GroupClaim | None = None  # the server group it joins, checked under the group's lock
    storage: VolumePlacement = NO_VOLUMES  # where its volumes go, checked under the pools' locks


@dataclass(frozen=True, slots=True)
class NoHost:
    """Record that ``vm_id`` (at ``attempt``) fits nowhere: pending -> unschedulable, or waiting
    when its ``wait_until`` is still ahead (PostgreSQL's clock decides)."""

    vm_id: UUID
    attempt: int
    strategy: Strategy
    reason: str  # "<reason>: <detail>", the VM's status_reason
    record: PlacementRecord


class Committed(enum.Enum):
    PLACED = "placed"  # the VM is scheduled on the host (a migration's target: committed)
    UNSCHEDULABLE = "unschedulable"  # a NoHost recorded: the VM is unschedulable
    NO_TARGET = "no_target"  # a NoTarget recorded: the VM stays on its source, the migration ended
    NOT_PENDING = "not_pending"  # the VM had left pending (a redelivery, a stale attempt, deleted)
    HOST_REFUSED = "host_refused"  # PostgreSQL's guard: the host cannot take it (the snapshot was stale)
    GROUP_REFUSED = "group_refused"  # PostgreSQL's guard: its server group's rule refuses the host
    RESERVE_REFUSED = "reserve_refused"  # PostgreSQL's guard: the zone's HA reserve has no room left for it
    WAITING = "waiting"  # a NoHost whose VM may wait for room: waiting, not unschedulable
    GANG_REFUSED = "gang_refused"  # all or nothing: another placement of the call was refused, so none was made
    VICTIM_MOVED = "victim_moved"  # preemption: a victim no longer holds its room there (deleted, moved, failed)
    BUDGET_SPENT = "budget_spent"  # preemption: a victim's server group has no disruption budget left
    NO_SLOT = "no_slot"  # its reservation holds no slot for it (used up, ended, not placed, not its project's)
    SLOT_BUSY = "slot_busy"  # its reservation is not placed yet, or its slots are being taken: try again


@dataclass(frozen=True, slots=True)
class PlacementResult:
    outcome: Committed
    scheduled_at: datetime | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Settlement:
    placements: list[PlacementResult]  # one per Placement, in order
    no_hosts: list[Committed]  # one per NoHost, in order: UNSCHEDULABLE, WAITING or NOT_PENDING
    wait_until: Mapping[UUID, datetime] = field(default_factory=dict)  # of the NoHosts now WAITING


@dataclass(frozen=True, slots=True)
class TargetClaim:
    """Commit ``host_id`` as the target of ``vm_id``'s migration number ``migration`` (task
    choosing_target -> preparing), its share added under the host's guard and its group's."""

    vm_id: UUID
    migration: int
    host_id: str
    resources: Resources
    record: PlacementRecord
    group: GroupClaim | None = None


@dataclass(frozen=True, slots=True)
class NoTarget:
    """Record that no host takes ``vm_id``'s migration ``migration``: it stays running on its source."""

    vm_id: UUID
    migration: int
    reason: str  # the rule, or "migration"
    detail: str
    record: PlacementRecord


@dataclass(frozen=True, slots=True)
class MigrationSettlement:
    targets: list[Committed]  # per TargetClaim: PLACED, HOST_REFUSED, GROUP_REFUSED or NOT_PENDING (no longer choosing)
    no_targets: list[Committed]  # per NoTarget: NO_TARGET (back to running) or NOT_PENDING


@dataclass(frozen=True, slots=True)
class SlotTaken:
    """What came of a VM taking a held slot of its reservation."""

    outcome: Committed  # PLACED, NOT_PENDING, NO_SLOT or SLOT_BUSY
    host_id: str = ""
    slot_id: UUID | None = None
    scheduled_at: datetime | None = None
    created_at: datetime | None = None
    why: str = ""  # for NO_SLOT: what the reservation holds, in words


class Ledger(Protocol):
    async def default_strategy(self) -> Strategy:
        """The cluster's default strategy (set at runtime, else the setting)."""
        ...

    async def online_hosts(self) -> int:
        """How many hosts PostgreSQL knows online and unpaused."""
        ...

    async def settle(
        self, placements: Sequence[Placement], no_hosts: Sequence[NoHost], *, all_or_nothing: bool = False
    ) -> Settlement:
        """Commit every placement and every unschedulable VM in one transaction. A placement is
        refused (HOST_REFUSED) when its host, with the placements of this call before it, would not
        fit it; the others are unaffected, unless ``all_or_nothing``: then none is made (the others
        GANG_REFUSED)."""
        ...

    async def load(self, vm_ids: Sequence[UUID]) -> Mapping[UUID, VmRecord]:
        """The VMs as PostgreSQL has them now (those that exist)."""
        ...

    async def residents(self, host_ids: Sequence[str], below: int) -> Mapping[str, list[Resident]]:
        """Per host, the VMs of priority below ``below`` a preemption may remove from it."""
        ...

    async def settle_preemption(
        self, placement: Placement, victims: Sequence[UUID], priority: int
    ) -> tuple[PlacementResult, list[VmRecord]]:
        """In one transaction: the victims (still on the placement's host, below ``priority``) become
        ``preempted`` and give their room back, and the placement is made under the host's guard; or
        nothing changes. The result, and the victims as now recorded (empty unless PLACED)."""
        ...

    async def settle_migrations(
        self, targets: Sequence[TargetClaim], no_targets: Sequence[NoTarget]
    ) -> MigrationSettlement:
        """Commit every migration target (each VM still choosing its target at that migration, each
        host under the fit rule, online, unpaused and able to migrate, each group under its rule)
        and every "no target" in one transaction."""
        ...

    async def take_slot(self, placement: Placement, reservation: UUID, project: str) -> SlotTaken:
        """In one transaction: a slot ``reservation`` (of ``project``) still holds becomes ``used``
        and the VM (still pending at its attempt) is scheduled on the slot's host in its room
        (``placement.host_id`` is ignored: the slot's host is the VM's)."""
        ...
