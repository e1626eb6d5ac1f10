"""The API's reads and writes of server groups in PostgreSQL.

A group's members are its VMs in any status but a terminal one (:data:`~vmsched_domain.lifecycle.TERMINAL`):
a pending, unschedulable or failed VM may still be placed (again), under the group's rule. Deleting a
group locks its row first, so a VM inserted meanwhile (whose foreign key check waits on that lock)
either lands before the count, and the delete is refused, or finds the group gone.

A group belongs to the project that made it: only that project's VMs may join it, and another
project's token finds no such group (an admin's finds every one).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import DEFAULT_PROJECT
from vmsched_domain.lifecycle import TERMINAL, sql_in
from vmsched_domain.records import ServerGroupRecord
from vmsched_pg.engine import retry_on_dead_connection
from vmsched_pg.rows import SERVER_GROUP_COLUMNS, server_group_from_row


class UnknownServerGroup(Exception):
    """A VM named a server group that does not exist."""

    def __init__(self, group_id: UUID) -> None:
        super().__init__(f"no server group {group_id}")
        self.group_id = group_id


class GroupHasMembers(Exception):
    """A server group with members cannot be deleted."""

    def __init__(self, members: int) -> None:
        super().__init__(f"the server group has {members} members; delete them first")
        self.members = members


@dataclass(frozen=True, slots=True)
class GroupWithMembers:
    group: ServerGroupRecord
    members: list[UUID]  # its VMs not in a terminal status, oldest first


_INSERT = text(
    f"""
    INSERT INTO server_groups (id, name, policy, topology_key, max_per_domain, max_skew, project, max_unavailable)
    VALUES (:id, :name, :policy, :topology_key, :max_per_domain, :max_skew, :project, :max_unavailable)
    RETURNING {SERVER_GROUP_COLUMNS}
    """
)
_SELECT = f"SELECT {SERVER_GROUP_COLUMNS} FROM server_groups"
_MEMBERS = text(
    f"""
    SELECT server_group, array_agg(id ORDER BY created_at, id) AS members FROM vms
     WHERE server_group = ANY(CAST(:ids AS uuid[])) AND status NOT IN {sql_in(TERMINAL)}
     GROUP BY server_group
    """
)
_LOCK = text("SELECT id, project FROM server_groups WHERE id = :id FOR UPDATE")
_DELETE = text("DELETE FROM server_groups WHERE id = :id")
# KEY SHARE, as the foreign key check takes it: a delete (FOR UPDATE) waits for the VMs' insert.
_EXISTING = text(
    "SELECT id FROM server_groups WHERE id = ANY(CAST(:ids AS uuid[])) AND project = :project FOR KEY SHARE"
)


async def check_groups_exist(connection: AsyncConnection, group_ids: Sequence[UUID | None], project: str) -> None:
    """Raise :class:`UnknownServerGroup` for the first of ``group_ids`` that is not a server group
    of ``project``."""
    wanted = [group_id for group_id in dict.fromkeys(group_ids) if group_id is not None]
    if not wanted:
        return
    found = {row.id for row in await connection.execute(_EXISTING, {"ids": wanted, "project": project})}
    for group_id in wanted:
        if group_id not in found:
            raise UnknownServerGroup(group_id)


class ServerGroupStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @retry_on_dead_connection
    async def create(
        self,
        *,
        name: str,
        policy: GroupPolicy,
        topology_key: str,
        max_per_domain: int,
        max_skew: int,
        project: str = DEFAULT_PROJECT,
        max_unavailable: int | None = None,
    ) -> GroupWithMembers:
        async with self.engine.begin() as connection:
            row = (
                await connection.execute(
                    _INSERT,
                    {
                        "id": uuid.uuid4(),
                        "name": name,
                        "policy": policy.value,
                        "topology_key": topology_key,
                        "max_per_domain": max_per_domain,
                        "max_skew": max_skew,
                        "project": project,
                        "max_unavailable": max_unavailable,
                    },
                )
            ).one()
        return GroupWithMembers(server_group_from_row(row), [])

    @retry_on_dead_connection
    async def list(self, project: str | None = None) -> list[GroupWithMembers]:
        """The groups of ``project`` (of every project for None)."""
        where = "WHERE project = :project" if project is not None else ""
        async with self.engine.connect() as connection:
            rows = (
                await connection.execute(text(f"{_SELECT} {where} ORDER BY created_at, id"), {"project": project})
            ).all()
            members = await _members(connection, [row.id for row in rows])
        return [GroupWithMembers(server_group_from_row(row), members.get(row.id, [])) for row in rows]

    @retry_on_dead_connection
    async def get(self, group_id: UUID, project: str | None = None) -> GroupWithMembers | None:
        """The group, if it is ``project``'s (any project's for None)."""
        async with self.engine.connect() as connection:
            row = (await connection.execute(text(f"{_SELECT} WHERE id = :id"), {"id": group_id})).first()
            if row is None or (project is not None and row.project != project):
                return None
            members = await _members(connection, [group_id])
        return GroupWithMembers(server_group_from_row(row), members.get(group_id, []))

    @retry_on_dead_connection
    async def delete(self, group_id: UUID, project: str | None = None) -> bool:
        """Delete the group; False when ``project`` has none such (any project for None). Raises
        :class:`GroupHasMembers` while it has any."""
        async with self.engine.begin() as connection:
            row = (await connection.execute(_LOCK, {"id": group_id})).first()
            if row is None or (project is not None and row.project != project):
                return False
            members = (await _members(connection, [group_id])).get(group_id, [])
            if members:
                raise GroupHasMembers(len(members))
            await connection.execute(_DELETE, {"id": group_id})
        return True


async def _members(connection: AsyncConnection, group_ids: list[UUID]) -> dict[UUID, list[UUID]]:
    if not group_ids:
        return {}
    rows = await connection.execute(_MEMBERS, {"ids": group_ids})
    return {row.server_group: list(row.members) for row in rows}
