"""PostgreSQL's guard of the server group rule: the settlement's check that a round's placements keep
every group within its rule, whatever Redis said.

The settlement locks the groups' rows (after the VMs', before the hosts': the order every writer
keeps), so two schedulers settling members of one group queue on each other; then this reads each
group's members per domain from the VMs that hold capacity (a migrating VM counts on its source and
on its target: in flight it may be on either) and walks the round's placements in
order, each checked by :func:`vmsched_domain.groups.refusal` and counted if it passes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Protocol
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from vmsched_domain.groups import domain_of, refusal
from vmsched_pg.shares import SHARES
from vmsched_redis.claims import GroupClaim

LOCK_GROUPS = text("SELECT id FROM server_groups WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE")

# The domain as vmsched_domain.groups.domain_of says (tests/integration/test_group_rule.py checks).
_MEMBERS = text(
    f"""
    SELECT s.server_group AS group_id,
           CASE WHEN g.topology_key = 'host' THEN h.id ELSE h.labels ->> g.topology_key END AS domain,
           count(*) AS members
      FROM ({SHARES}) s JOIN server_groups g ON g.id = s.server_group JOIN hosts h ON h.id = s.host_id
     WHERE s.server_group = ANY(CAST(:ids AS uuid[]))
     GROUP BY 1, 2
    """
)


class Joining(Protocol):
    """A VM about to count on a host (a placement, or a migration's target)."""

    @property
    def vm_id(self) -> UUID: ...
    @property
    def host_id(self) -> str: ...
    @property
    def group(self) -> GroupClaim | None: ...


def hard_groups(placements: Sequence[Joining]) -> list[UUID]:
    """The groups whose rule the settlement of ``placements`` must check, in id order (lock order)."""
    return sorted({p.group.rule.id for p in placements if p.group is not None and p.group.rule.hard})


async def refused_by_groups(
    connection: AsyncConnection, placements: Sequence[Joining], labels: Mapping[str, Mapping[str, str]]
) -> dict[UUID, str]:
    """The placements (by VM id) the group rule refuses, with why, given the groups' members now and
    the placements before each in ``placements``. The caller holds the groups' row locks; ``labels``
    are the hosts' labels, read under their locks."""
    groups = hard_groups(placements)
    if not groups:
        return {}
    members: dict[UUID, dict[str, int]] = defaultdict(dict)
    for row in await connection.execute(_MEMBERS, {"ids": groups}):
        if row.domain is not None:
            members[row.group_id][row.domain] = int(row.members)
    refused: dict[UUID, str] = {}
    for placement in placements:
        group = placement.group
        if group is None or not group.rule.hard:
            continue
        counted = members[group.rule.id]
        domain = domain_of(group.rule.topology_key, placement.host_id, labels.get(placement.host_id, {}))
        why = refusal(group.rule, domain, counted, group.eligible)
        if why is not None:
            refused[placement.vm_id] = why
        elif domain is not None:
            counted[domain] = counted.get(domain, 0) + 1
    return refused
