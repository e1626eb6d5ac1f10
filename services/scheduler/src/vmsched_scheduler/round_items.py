"""What a scheduling round works on and answers: the VMs it was given, what it learnt of each while
deciding, and each VM's outcome, with the records and messages built from them.

Shared by every kind of pass (:mod:`vmsched_scheduler.round`): placements, all-or-nothing batches
(:mod:`~vmsched_scheduler.gangs`) and migration targets (:mod:`~vmsched_scheduler.migration_round`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from opentelemetry import context as otel_context

from vmsched_contract.decision import Candidate, JournalRef, PlacementRecord, RefusedClaim, RejectedHost
from vmsched_contract.messages import Assignment, Unplaced, VmMigrate, VmToPlace, WaitingVm
from vmsched_contract.status import VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_domain.lifecycle import HOLDS_CAPACITY
from vmsched_domain.records import VmRecord
from vmsched_domain.storage import NO_VOLUMES, PoolTake, VolumePlacement, pool_takes
from vmsched_placement import NO_AVAILABLE_AGENTS, Decision, PlacementRequest, Weights
from vmsched_placement.inputs import placement_request, volumes_of
from vmsched_placement.model import FailoverReserve, Migration, PlacementGroup
from vmsched_redis.claims import GroupClaim
from vmsched_scheduler.metrics import PLACEMENTS
from vmsched_scheduler.ports import Placement


@dataclass(frozen=True, slots=True)
class RoundSettings:
    weights: Weights
    offline_timeout: float
    max_passes: int = 4
    fallbacks: int = 4  # hosts ranked after the chosen one, recorded as candidates
    preemption: bool = True  # VMSCHED_PREEMPTION: a VM that fits nowhere may take lower-priority VMs' room
    exclude_cluster_after: int = 0  # VMSCHED_EXCLUDE_CLUSTER_AFTER: failed hosts that leave their cluster out


@dataclass(frozen=True, slots=True)
class RoundItem:
    """A VM to place, and the trace context of the message that asked (its spans go there)."""

    vm: VmToPlace
    trace: otel_context.Context | None = None


# -- what each VM comes to ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Assigned:
    assignment: Assignment
    fresh: bool  # placed by this round; False: announced again from PostgreSQL (a redelivery)
    log_lines: tuple[str, ...] = ()  # the seed's "Scheduling VM ..." and "Selected agent ..." lines
    preempted: tuple[VmRecord, ...] = ()  # the VMs whose room it took, as now recorded (preempted)


@dataclass(frozen=True, slots=True)
class NotPlaced:
    unplaced: Unplaced
    fresh: bool


@dataclass(frozen=True, slots=True)
class Waiting:
    """No host fits it yet; it waits for room (its wait_s has not passed)."""

    waiting: WaitingVm
    fresh: bool


@dataclass(frozen=True, slots=True)
class Ignored:
    """Nothing to announce: the VM is gone, deleted, or at another attempt than the message's."""

    why: str


@dataclass(frozen=True, slots=True)
class Later:
    """Not settled in this round; try the VM again in a later one."""

    why: str


Outcome = Assigned | NotPlaced | Waiting | Ignored | Later


# -- what the round learns of each VM while it works -------------------------------------------
@dataclass(slots=True)
class OpenVm:
    """A VM not yet settled in this round, and what the round learnt about it so far."""

    index: int
    item: RoundItem
    strategy: Strategy
    avoid: set[str] = field(default_factory=set)  # hosts that refused its claim in this round
    refused: list[RefusedClaim] = field(default_factory=list)
    move: VmMigrate | None = None  # set when choosing a migration's target (vmsched_scheduler.migration_round)
    exclude_cluster_after: int = 0  # RoundSettings.exclude_cluster_after

    def always_out(self) -> frozenset[str]:
        """Hosts never tried for it, even when its exclusions are set aside: those that refused its
        claim in this round and, for a migration, its source."""
        return frozenset(self.avoid | ({self.move.source} if self.move is not None else set()))

    def request(
        self,
        group: PlacementGroup | None,
        project_pods: Mapping[str, int] | None = None,
        reserve: FailoverReserve | None = None,
    ) -> PlacementRequest:
        """What the engine is asked for it: the VM as its message carries it, less the hosts this
        round or its earlier deliveries left out for it (and, for a migration, its source); its
        project's VMs per pod for ``user_concentrated``; the HA reserve's headroom as the pass knew
        it when the VM was decided."""
        move = self.move
        return placement_request(
            self.item.vm,
            self.strategy,
            exclude_hosts=self.always_out(),
            group=group,
            migration=None if move is None else Migration(move.source, move.target_host),
            project_pods=project_pods,
            exclude_cluster_after=self.exclude_cluster_after,
            reserve=reserve,
        )


def opened(items: Sequence[RoundItem], default: Strategy, exclude_cluster_after: int) -> list[OpenVm]:
    """The round's VMs, open: each with its strategy (its own, else the cluster's ``default``)."""
    return [
        OpenVm(i, item, item.vm.strategy or default, exclude_cluster_after=exclude_cluster_after)
        for i, item in enumerate(items)
    ]


@dataclass(slots=True)
class Choice:
    """A decision for one open VM, and what became of its claim."""

    work: OpenVm
    decision: Decision
    seconds: float
    exclusions_ignored: bool
    host_id: str = ""  # the host the claim holds (the chosen one, or an earlier delivery's)
    claimed_now: bool = False
    group: GroupClaim | None = None  # its server group's rule, as the claim and the commit check it
    # Its server group as the engine saw it when deciding. Kept here, not on the round: a gang's
    # round may run beside a batched one.
    placement_group: PlacementGroup | None = None
    reserve: FailoverReserve | None = None  # the HA reserve's headroom as the engine saw it
    gang_failure: str = ""  # all or nothing: it had a host, but another VM of its batch had none
    journal: JournalRef | None = None  # where its inputs are kept

    @property
    def vm(self) -> VmToPlace:
        return self.work.item.vm

    @property
    def pools(self) -> tuple[PoolTake, ...]:
        """What the VM's volumes take of each storage pool on the chosen host (none: no volumes)."""
        if not self.decision.volumes:
            return ()
        return pool_takes(volumes_of(self.vm.volumes, moving=self.work.move is not None), self.decision.volumes)

    @property
    def storage(self) -> VolumePlacement:
        """Where its volumes went, when its claim holds the chosen host (an earlier delivery's claim
        elsewhere took what it took there)."""
        if not self.decision.volumes or self.host_id != self.decision.host_id:
            return NO_VOLUMES
        return VolumePlacement(self.decision.volumes, self.pools)

    @property
    def pool_gb(self) -> dict[str, int]:
        """GB per pool of :attr:`pools`, as the fleet books them."""
        return {take.name: take.gb for take in self.pools}


# -- records and messages built from them ------------------------------------------------------
def decision_record(
    choice: Choice,
    *,
    host: str | None,
    score: float | None,
    reason: str | None = None,
    detail: str | None = None,
    examples: dict[str, list[RejectedHost]] | None = None,
) -> PlacementRecord:
    """The decision record kept with the VM (``GET /v1/vms/{id}/placement``)."""
    decision = choice.decision
    scores = decision.scores
    return PlacementRecord(
        strategy=choice.work.strategy,
        host=host,
        score=score,
        candidates=[
            Candidate(host=ranked, score=None if scores is None else scores[position])
            for position, ranked in enumerate(decision.ranked)
        ],
        considered=decision.considered,
        eligible=decision.eligible,
        rejections=dict(decision.rejections),
        preferences=dict(decision.preferences),
        preferred=decision.preferred if decision.preferences else None,
        reason=reason,
        cluster=decision.cluster,
        detail=detail,
        examples=examples or {},
        refused_claims=list(choice.work.refused),
        exclusions_ignored=choice.exclusions_ignored,
        volumes=list(choice.storage.pools) if host is not None else [],
        decided_at=datetime.now(UTC),
        decision_us=round(choice.seconds * 1e6, 1),
        claim_conflicts=len(choice.work.refused),
        journal=choice.journal,
    )


def assignment_of(
    vm: VmToPlace, placement: Placement, scheduled_at: datetime, *, preempted: bool = False
) -> Assignment:
    """The VM placed by this round (``preempted``: by taking the room of lower-priority VMs)."""
    return Assignment(
        vm_id=vm.vm_id,
        name=vm.name,
        hypervisor_id=placement.host_id,
        resources=vm.resources,
        strategy=placement.strategy,
        attempt=vm.attempt,
        scheduled_at=scheduled_at,
        project=vm.project,
        preempted=preempted,
    )


def unplaced_of(vm: VmToPlace, record: PlacementRecord) -> Unplaced:
    return Unplaced(
        vm_id=vm.vm_id,
        attempt=vm.attempt,
        reason=record.reason or NO_AVAILABLE_AGENTS,
        detail=record.detail or "",
        rejections=dict(record.rejections),
        project=vm.project,
    )


def waiting_of(vm: VmToPlace, record: PlacementRecord, until: datetime) -> WaitingVm:
    return WaitingVm(**unplaced_of(vm, record).model_dump(), wait_until=until)


def announced(vm: VmToPlace, record: VmRecord | None) -> Outcome:
    """What to announce again for a VM an earlier delivery settled (same attempt), else nothing."""
    if record is None:
        return Ignored("no such VM")
    if record.attempt != vm.attempt:
        return Ignored(f"stale: the VM is at attempt {record.attempt}")
    PLACEMENTS.labels((record.strategy or Strategy.LEAST_LOADED).value, "duplicate").inc()
    if record.status in HOLDS_CAPACITY and record.hypervisor_id and record.scheduled_at:
        return Assigned(
            Assignment(
                vm_id=vm.vm_id,
                name=vm.name,
                hypervisor_id=record.hypervisor_id,
                resources=vm.resources,
                strategy=record.strategy or Strategy.LEAST_LOADED,
                attempt=vm.attempt,
                scheduled_at=record.scheduled_at,
                project=vm.project,
            ),
            False,
        )
    if record.status is VmStatus.UNSCHEDULABLE and record.placement:
        placement = PlacementRecord.model_validate(record.placement)
        return NotPlaced(unplaced_of(vm, placement), False)
    if record.status is VmStatus.WAITING and record.placement and record.wait_until:
        placement = PlacementRecord.model_validate(record.placement)
        return Waiting(waiting_of(vm, placement, record.wait_until), False)
    return Ignored(f"the VM is {record.status.value}")
