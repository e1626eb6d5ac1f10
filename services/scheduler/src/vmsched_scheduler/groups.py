"""A round's server groups: each group's rule, and its members per domain as the snapshot counted them
when the pass began, plus the pass's own choices (booked as they are made, as capacity is on the
fleet: the tenth member decided in a pass sees where the nine before it went).

Counted the same way, for the ``user_concentrated`` strategy: the VMs each project runs per pod
(PostgreSQL's count when the pass began, plus the pass's own choices), read only for the projects of
the pass's VMs that use that strategy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.groups import GroupPolicy
from vmsched_contract.hierarchy import POD_LABEL
from vmsched_contract.messages import VmToPlace
from vmsched_contract.strategy import Strategy
from vmsched_domain.groups import GroupRule, domain_of
from vmsched_pg.project_pods import project_pods
from vmsched_pg.rows import SERVER_GROUP_COLUMNS, server_group_from_row
from vmsched_placement import DecisionContext, Fleet, PlacementRequest, RequestVector
from vmsched_placement.filters import SPREAD_FILTER
from vmsched_placement.model import PlacementGroup
from vmsched_redis.claims import GroupClaim
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)


class PassItem(Protocol):
    @property
    def vm(self) -> VmToPlace: ...


class PassVm(Protocol):
    """A VM of a pass, as :class:`~vmsched_scheduler.round_items.OpenVm` is."""

    @property
    def item(self) -> PassItem: ...
    @property
    def strategy(self) -> Strategy: ...


def concentrated(work: Iterable[PassVm]) -> list[str]:
    """The projects of the VMs placed ``user_concentrated``: those whose pods a pass counts."""
    return sorted({w.item.vm.project for w in work if w.strategy is Strategy.USER_CONCENTRATED})


class GroupSource(Protocol):
    async def rules(self, group_ids: Sequence[UUID]) -> Mapping[UUID, GroupRule]:
        """The groups' definitions (those that exist)."""
        ...

    async def members(self, group_ids: Sequence[UUID]) -> Mapping[UUID, Mapping[str, int]]:
        """Each group's members per domain, as the claims counted them."""
        ...

    async def project_pods(self, projects: Sequence[str]) -> Mapping[str, Mapping[str, int]]:
        """Each project's VMs per pod."""
        ...


_RULES = text(f"SELECT {SERVER_GROUP_COLUMNS} FROM server_groups WHERE id = ANY(CAST(:ids AS uuid[]))")


class ServerGroups:
    """Rules from PostgreSQL (kept: a group never changes), members from the Redis snapshot."""

    def __init__(self, engine: AsyncEngine, snapshot: Snapshot) -> None:
        self.engine = engine
        self.snapshot = snapshot
        self._rules: dict[UUID, GroupRule] = {}

    async def rules(self, group_ids: Sequence[UUID]) -> Mapping[UUID, GroupRule]:
        unknown = [group_id for group_id in group_ids if group_id not in self._rules]
        if unknown:
            async with self.engine.connect() as connection:
                for row in await connection.execute(_RULES, {"ids": unknown}):
                    self._rules[row.id] = server_group_from_row(row).rule
        return {group_id: self._rules[group_id] for group_id in group_ids if group_id in self._rules}

    async def members(self, group_ids: Sequence[UUID]) -> Mapping[UUID, Mapping[str, int]]:
        return await self.snapshot.group_members(group_ids)

    async def project_pods(self, projects: Sequence[str]) -> Mapping[str, Mapping[str, int]]:
        async with self.engine.connect() as connection:
            return await project_pods(connection, projects)


class RoundGroups:
    """The groups of one pass's VMs."""

    def __init__(
        self,
        rules: Mapping[UUID, GroupRule],
        members: Mapping[UUID, Mapping[str, int]],
        pods: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self.rules = dict(rules)
        self.members = {group_id: dict(members.get(group_id, {})) for group_id in self.rules}
        self.pods = {project: dict(counts) for project, counts in (pods or {}).items()}

    @classmethod
    async def load(
        cls, source: GroupSource | None, vms: Iterable[VmToPlace], *, projects: Iterable[str] = ()
    ) -> RoundGroups:
        """The groups of ``vms``, and the pods of ``projects`` (:func:`concentrated`)."""
        wanted = sorted({vm.server_group for vm in vms if vm.server_group is not None})
        projects = sorted(set(projects))
        if source is None or not (wanted or projects):
            return cls({}, {})
        rules = await source.rules(wanted) if wanted else {}
        for group_id in set(wanted) - set(rules):
            # The API refuses to delete a group with members: a VM of a deleted one is placed freely.
            log.warning("server group of a VM to place not found; placing it without", group_id=str(group_id))
        members = await source.members(sorted(rules)) if rules else {}
        return cls(rules, members, await source.project_pods(projects) if projects else None)

    def project_pods(self, work: PassVm) -> Mapping[str, int]:
        """The engine's view of the VM's project's pods (a copy), for a VM placed ``user_concentrated``."""
        if work.strategy is not Strategy.USER_CONCENTRATED:
            return {}
        return dict(self.pods.get(work.item.vm.project, {}))

    def placement_group(self, vm: VmToPlace) -> PlacementGroup | None:
        """The engine's view of the VM's group: a copy of the members now."""
        rule = self.rules.get(vm.server_group) if vm.server_group is not None else None
        if rule is None:
            return None
        return PlacementGroup(rule, dict(self.members[rule.id]))

    def claim(self, request: PlacementRequest, fleet: Fleet, context: DecisionContext) -> GroupClaim | None:
        """What the claim and the commit check for the VM: its group's rule and, for a spread, the
        eligible domains the engine weighed (a soft group's claim is counted, never refused)."""
        group = request.group
        if group is None:
            return None
        if group.rule.policy is not GroupPolicy.SPREAD:
            return GroupClaim(group.rule)
        vector = RequestVector.of(request, context)
        return GroupClaim(group.rule, tuple(SPREAD_FILTER.domains(fleet.columns, vector)))

    def book(self, vm: VmToPlace, fleet: Fleet, host_id: str) -> None:
        """Count the VM in its group's domain on ``host_id``, and in its project's pod there, for the
        decisions after it."""
        rule = self.rules.get(vm.server_group) if vm.server_group is not None else None
        host = fleet.host(host_id)
        pods = self.pods.get(vm.project)
        if pods is not None and host is not None and (pod := host.labels.get(POD_LABEL)) is not None:
            pods[pod] = pods.get(pod, 0) + 1
        if rule is None or host is None:
            return
        domain = domain_of(rule.topology_key, host.id, host.labels)
        if domain is not None:
            counted = self.members[rule.id]
            counted[domain] = counted.get(domain, 0) + 1
