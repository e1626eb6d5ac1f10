"""The decision record: why a VM went where it went, or why it went nowhere.

Written by the scheduler with the placement (one JSON column of the VM's row), served by
``GET /v1/vms/{id}/placement`` (read by the client library and ``vmsched vms why``). It is kept
cheap to make: counts by rule and the few best candidates for every VM; examples of rejected hosts
with the numbers only when no host fits (a person then needs them, and the pass that finds them is
paid once).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from vmsched_contract.strategy import Strategy


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str
    score: float | None = Field(description="the strategy's score (lower is better); null for unscored strategies")


class RejectedHost(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str
    reason: str = Field(description="the rule's reason with the numbers, e.g. 'gpu: needs 1, 0 free (...)'")


class RefusedClaim(BaseModel):
    """A host the engine chose that refused the VM when claimed (another scheduler took the room first,
    or the engine's copy of the host was stale), and the rule it then failed."""

    model_config = ConfigDict(frozen=True)

    host: str
    stage: str = Field(description="redis (the atomic claim) or postgres (the commit's guard)")
    outcome: str = Field(
        description="insufficient, offline, paused, unknown_host or group (its server group's rule, in Redis); "
        "host_refused or group_refused (PostgreSQL's guard)"
    )
    detail: str = ""


class JournalKind(StrEnum):
    """What a journaled decision chose."""

    PLACEMENT = "placement"  # the engine's host for the VM
    PREEMPTION = "preemption"  # the host and the victims of a preemption
    RESERVATION_SLOT = "reservation_slot"  # the engine's host for the reservation's slot the VM took


class JournalRef(BaseModel):
    """Where a decision's exact inputs are kept (the ``decision_journal`` table): its scheduler
    replica's chain and its number there."""

    model_config = ConfigDict(frozen=True)

    replica: str
    seq: int
    kind: JournalKind = Field(
        default=JournalKind.PLACEMENT,
        description="placement (the engine's choice for this VM), preemption (the host and victims it chose), or "
        "reservation_slot (the engine's choice for the reservation's slot the VM took: the VM's host)",
    )


class PlacementRecord(BaseModel):
    """One VM's placement decision."""

    model_config = ConfigDict(frozen=True)

    strategy: Strategy
    host: str | None = Field(description="the host the VM was placed on; null when unschedulable")
    score: float | None = None
    candidates: list[Candidate] = Field(
        default_factory=list, description="the chosen host, then the next best ones, best first"
    )
    considered: int = Field(description="hosts the scheduler knew of")
    eligible: int = Field(description="hosts that passed every rule")
    rejections: dict[str, int] = Field(
        default_factory=dict, description="hosts rejected, counted under the first rule each failed"
    )
    preferences: dict[str, int] = Field(
        default_factory=dict,
        description="eligible hosts each soft rule (weigher: taints for PreferNoSchedule, gpu_affinity) would "
        "rather not use; the strategy ranked only the eligible hosts of the lowest penalty",
    )
    preferred: int | None = Field(
        default=None, description="eligible hosts of the lowest penalty, that the strategy ranked; null: no preference"
    )
    reason: str | None = Field(
        default=None,
        description="why no host: no_available_agents, or the rule that rejected the most hosts; null when placed",
    )
    cluster: str | None = Field(
        default=None,
        description="planner cluster_first: the cluster whose hosts the strategy ranked; null: every eligible host",
    )
    detail: str | None = Field(default=None, description="the reason in words, with every rule's count")
    examples: dict[str, list[RejectedHost]] = Field(
        default_factory=dict,
        description="for an unschedulable VM: up to three rejected hosts per rule, with the numbers",
    )
    refused_claims: list[RefusedClaim] = Field(default_factory=list)
    exclusions_ignored: bool = Field(
        default=False,
        description="every host that fits had failed this VM before, so its exclusions were set aside",
    )
    volumes: list[str] = Field(
        default_factory=list,
        # Left out when empty: the records of VMs without volumes are what they were.
        exclude_if=lambda pools: not pools,
        description="the storage pool of each volume the VM asks for, on the chosen host (first fit)",
    )
    decided_at: datetime
    decision_us: float = Field(description="microseconds the decision took (filters and strategy, in memory)")
    claim_conflicts: int = Field(default=0, description="claims refused before one held")
    journal: JournalRef | None = Field(
        default=None,
        description="where the decision's inputs are kept (GET /v1/vms/{id}/placement/replay); null for a "
        "record written before the journal",
    )


class PreemptionMove(BaseModel):
    """A preemption that made room for a VM by moving its victims off a host (issue 27): kept with
    the preemptor (``vms.preemption``), since the VM is placed later by a decision of its own once
    the victims have left, and that later decision's record replaces the one of the preemption."""

    model_config = ConfigDict(frozen=True)

    journal: JournalRef | None = Field(description="the preemption's decision (kind preemption); null: not journaled")
    host: str = Field(description="the host the victims were moved off")
    victims: list[str] = Field(description="the VMs moved off the host for it (their ids)")
    decided_at: datetime
