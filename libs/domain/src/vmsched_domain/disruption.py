"""Disruption budgets (Kubernetes' PodDisruptionBudget, for a server group): how many members of a
group may be unavailable at once, and whether a voluntary disruption (a drain's or a rebalance plan's
migration, a preemption) may take one more. Pure: no I/O.

A member is *available* while it is ``running``; every other member not ``deleted`` is unavailable:
one migrating (a drain's, a plan's, anyone's), preempted, stopped, failed, restarting, not placed yet.
As Kubernetes counts a pod that is not ready, a member that is down for any reason uses the budget:
a group of 3 with ``max_unavailable: 1`` and one member failed lets nothing else be disrupted.
An operator's own ``POST /v1/vms/{id}/migrate`` and stops are not checked (they are not automatic).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

from vmsched_contract.status import VmStatus
from vmsched_domain.lifecycle import sql_in

AVAILABLE: frozenset[VmStatus] = frozenset({VmStatus.RUNNING})
NOT_MEMBERS: frozenset[VmStatus] = frozenset({VmStatus.DELETED})
# The statuses of members that use the budget, as SQL: ``status IN (...)``.
UNAVAILABLE_SQL = sql_in(tuple(s.value for s in VmStatus if s not in AVAILABLE | NOT_MEMBERS))
REASON = "disruption_budget"


def is_unavailable(status: VmStatus) -> bool:
    return status not in AVAILABLE and status not in NOT_MEMBERS


@dataclass(frozen=True, slots=True)
class Budget:
    """A group's budget now: ``max_unavailable`` (None: no budget, anything goes) and how many of its
    members are unavailable."""

    group_id: UUID
    max_unavailable: int | None
    unavailable: int

    @property
    def left(self) -> int | None:
        """How many more members may be disrupted (None: no limit)."""
        if self.max_unavailable is None:
            return None
        return max(0, self.max_unavailable - self.unavailable)

    def refusal(self, taking: int = 1) -> str | None:
        """Why ``taking`` more members may not be disrupted now, or None if they may."""
        left = self.left
        if left is None or taking <= left:
            return None
        return (
            f"{REASON}: server group {self.group_id} allows {self.max_unavailable} member(s) unavailable and has "
            f"{self.unavailable}"
        )

    def taken(self, count: int = 1) -> Budget:
        return Budget(self.group_id, self.max_unavailable, self.unavailable + count)


def counted(group_id: UUID, max_unavailable: int | None, statuses: Iterable[VmStatus]) -> Budget:
    """The budget of a group whose members have ``statuses`` (the reference the SQL count follows)."""
    return Budget(group_id, max_unavailable, sum(1 for status in statuses if is_unavailable(status)))
