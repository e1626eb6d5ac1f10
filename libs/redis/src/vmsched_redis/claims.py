"""Claims on the Redis snapshot: what a claim asks for (a VM's room on a host, as a member of its
server group), and what the claim script answers, per claim and per host it changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

from vmsched_contract.messages import Resources
from vmsched_domain.claims import target_claim_id
from vmsched_domain.groups import GroupRule
from vmsched_domain.storage import PoolTake
from vmsched_redis.host_hash import amounts
from vmsched_redis.storage_pools import take_args

ClaimOutcome = Literal[
    "claimed", "held", "unknown_host", "offline", "paused", "insufficient", "storage", "group", "gang", "victim_moved"
]


@dataclass(frozen=True, slots=True)
class ClaimResult:
    outcome: ClaimOutcome
    detail: str

    @property
    def holds(self) -> bool:
        """The VM now holds a claim (new or from before) on host ``detail``."""
        return self.outcome in ("claimed", "held")


@dataclass(frozen=True, slots=True)
class OwnChange:
    """A host a claim changed: the change number it had before, and the one the claim gave it."""

    before: int
    seq: int


@dataclass(frozen=True, slots=True)
class Claimed:
    results: list[ClaimResult]  # one per claim, in order
    changes: dict[str, OwnChange]  # per host claimed on


@dataclass(frozen=True, slots=True)
class GroupClaim:
    """The server group a claim is a member of: its rule is checked with the capacity, against the
    group's counts in Redis; ``eligible`` are the spread's eligible domains, as the engine found them."""

    rule: GroupRule
    eligible: tuple[str, ...] = ()

    def args(self) -> list[str]:
        rule = self.rule
        return [
            str(rule.id),
            rule.reason_name,
            "1" if rule.hard else "0",
            rule.policy.value,
            rule.topology_key,
            str(rule.max_per_domain),
            str(rule.max_skew),
            str(len(self.eligible)),
            *self.eligible,
        ]


_NO_GROUP_ARGS = ["", "", "0", "", "", "0", "0", "0"]


@dataclass(frozen=True, slots=True)
class Claim:
    """Reserve ``resources`` on ``host_id`` for ``vm_id`` (a member of ``group``, if not None): its
    claim, or with ``target`` its target claim (the host it migrates to)."""

    vm_id: UUID
    host_id: str
    resources: Resources
    group: GroupClaim | None = None
    target: bool = False
    pools: tuple[PoolTake, ...] = ()  # what its volumes take of each storage pool (vmsched_domain.storage)

    @property
    def claim_id(self) -> str:
        return target_claim_id(self.vm_id) if self.target else str(self.vm_id)


@dataclass(frozen=True, slots=True)
class CommittedVm:
    """A share of a host PostgreSQL counts: a VM's (``claim_id`` its id) or a migrating VM's on its
    target (its target claim id)."""

    claim_id: UUID | str
    resources: Resources


def script_args(claim: Claim) -> list[str]:
    """A claim's arguments for the claim script (its ARGV layout, per claim)."""
    args = [claim.claim_id, claim.host_id, *amounts(claim.resources), *_extra_args(claim.resources)]
    args += take_args(claim.pools)
    return args + (_NO_GROUP_ARGS if claim.group is None else claim.group.args())


def claimed_from_reply(replies: Any, changes: Any) -> Claimed:
    """The claim script's reply: per claim (outcome, detail); per host changed, its id, its change
    number before and its new one."""
    return Claimed(
        [ClaimResult(outcome=outcome, detail=detail) for outcome, detail in replies],
        {changes[at]: OwnChange(int(float(changes[at + 1])), int(changes[at + 2])) for at in range(0, len(changes), 3)},
    )


def _extra_args(resources: Resources) -> list[str]:
    """The claim's named extra resources: how many, then each name and amount, sorted by name."""
    asked = sorted((name, count) for name, count in resources.extra.items() if count > 0)
    return [str(len(asked)), *(part for name, count in asked for part in (name, str(count)))]
