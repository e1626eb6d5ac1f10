"""Project quotas, enforced when VMs are accepted.

The check runs in the transaction that inserts the VMs, under the project's row lock: concurrent
requests of one project, on any API replica, take turns, and each sees what the others committed.
Usage is what the project's VMs hold in a status that counts (``lifecycle.USES_QUOTA``): it is
given back as soon as a VM ends deleted, unschedulable or failed, with no counter to keep right.
A project without any limit takes no lock at all.

Reservations count as the VMs they hold room for: a pending one its whole ``count``, a placed one
each slot still held (an instance and its resources each). A VM naming a reservation counts only
once it took a slot (the slot then counts no more), so a VM using held room is never counted twice;
it is accepted without a quota check of its resources (the reservation's were checked when made).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, literal_column, text
from sqlalchemy.ext.asyncio import AsyncConnection

from vmsched_contract.status import ReservationStatus, VmStatus
from vmsched_domain.lifecycle import USES_QUOTA, sql_in
from vmsched_domain.reservations import SlotStatus

# The limits on what VMs hold; max_priority limits a request, not a sum.
SUMMED = ("instances", "cpu", "memory_mb", "disk_gb", "gpu")
_LIMITS = ", ".join(f"quota_{resource}" for resource in SUMMED)
_READ = text(f"SELECT {_LIMITS}, quota_max_priority FROM projects WHERE name = :project")
_LOCK = text(f"SELECT {_LIMITS} FROM projects WHERE name = :project FOR UPDATE")
# A VM naming a reservation, before it takes a slot (the slot still counts meanwhile).
_NOT_YET_IN_A_SLOT = sql_in({VmStatus.PENDING, VmStatus.WAITING})
USAGE = text(
    f"""
    SELECT coalesce(sum(n), 0) AS instances, coalesce(sum(cpu), 0) AS cpu,
           coalesce(sum(memory_mb), 0) AS memory_mb, coalesce(sum(disk_gb), 0) AS disk_gb,
           coalesce(sum(gpu), 0) AS gpu
      FROM (
        SELECT 1 AS n, cpu, memory_mb, disk_gb, gpu FROM vms
         WHERE project = :project AND status IN {sql_in(USES_QUOTA)}
           AND (reservation IS NULL OR status NOT IN {_NOT_YET_IN_A_SLOT})
        UNION ALL
        SELECT 1, s.cpu, s.memory_mb, s.disk_gb, s.gpu FROM reservation_slots s
          JOIN reservations r ON r.id = s.reservation_id
         WHERE r.project = :project AND s.status = '{SlotStatus.HELD.value}'
        UNION ALL
        SELECT count, cpu * count, memory_mb * count, disk_gb * count, gpu * count FROM reservations
         WHERE project = :project AND status = '{ReservationStatus.PENDING.value}'
      ) counted
    """
)


# Returned by the statement that inserts VMs (a column of each row, correlated with its project):
# whether the project has any limit. Most projects have none, and their requests then read nothing
# more, where a separate read of the limits cost a round trip per request.
LIMITED: ColumnElement[bool] = literal_column(
    "EXISTS (SELECT 1 FROM projects p WHERE p.name = vms.project AND ("
    + " OR ".join(f"p.quota_{resource} IS NOT NULL" for resource in (*SUMMED, "max_priority"))
    + "))"
).label("limited")


class QuotaExceeded(Exception):
    """A request would take the project past one of its limits."""

    def __init__(self, resource: str, limit: int, used: int, requested: int) -> None:
        super().__init__(f"{resource}: {used} used + {requested} requested > {limit}")
        self.resource, self.limit, self.used, self.requested = resource, limit, used, requested

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuotaExceeded) and self.answer() == other.answer()

    def __hash__(self) -> int:
        return hash(tuple(self.answer().items()))

    def answer(self) -> dict[str, Any]:
        return {
            "reason": "quota_exceeded",
            "resource": self.resource,
            "limit": self.limit,
            "used": self.used,
            "requested": self.requested,
        }


def requested_by(rows: Sequence[Any]) -> dict[str, int]:
    """What inserted VM rows ask for, per summed resource (those naming a reservation: nothing)."""
    rows = [row for row in rows if getattr(row, "reservation", None) is None]
    return {
        "instances": len(rows),
        **{resource: sum(getattr(row, resource) for row in rows) for resource in SUMMED if resource != "instances"},
    }


def first_excess(
    limits: Mapping[str, int | None], used_after: Mapping[str, int], requested: Mapping[str, int]
) -> QuotaExceeded | None:
    """The first limit (in SUMMED's order) that ``used_after`` (usage with the request) exceeds."""
    for resource in SUMMED:
        limit = limits.get(resource)
        if limit is not None and used_after[resource] > limit:
            ask = requested[resource]
            return QuotaExceeded(resource, limit, used_after[resource] - ask, ask)
    return None


def priority_excess(max_priority: int | None, rows: Sequence[Any]) -> QuotaExceeded | None:
    """A VM asking a priority above its project's ``max_priority`` (its quota's cap on how much its
    VMs may preempt), or None."""
    if max_priority is None:
        return None
    highest = max((row.priority for row in rows), default=0)
    return QuotaExceeded("max_priority", max_priority, 0, highest) if highest > max_priority else None


async def enforce(connection: AsyncConnection, project: str, inserted: Sequence[Any]) -> None:
    """Raise QuotaExceeded (the caller's transaction then rolls back the insert) when the VMs just
    inserted take ``project`` past a limit. Rows that carry ``LIMITED`` and say False skip it all."""
    if not inserted or not any(getattr(row, "limited", True) for row in inserted):
        return
    row = (await connection.execute(_READ, {"project": project})).first()
    if row is None or all(value is None for value in row):
        return
    too_high = priority_excess(row.quota_max_priority, inserted)
    if too_high is not None:
        raise too_high
    await enforce_amounts(connection, project, requested_by(inserted))


async def enforce_amounts(connection: AsyncConnection, project: str, requested: Mapping[str, int]) -> None:
    """Raise QuotaExceeded when ``requested`` (already inserted: usage includes it) takes ``project``
    past a limit of its summed resources."""
    row = (await connection.execute(_READ, {"project": project})).first()
    if row is None or all(getattr(row, f"quota_{resource}") is None for resource in SUMMED):
        return
    limits = (await connection.execute(_LOCK, {"project": project})).one()._mapping
    usage = (await connection.execute(USAGE, {"project": project})).one()._mapping
    excess = first_excess(
        {resource: limits[f"quota_{resource}"] for resource in SUMMED},
        {resource: int(usage[resource]) for resource in SUMMED},
        requested,
    )
    if excess is not None:
        raise excess
