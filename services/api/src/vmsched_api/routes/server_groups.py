"""/v1/server-groups: groups of VMs kept apart, together or spread (vmsched_domain.groups)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, HTTPException, Response, status

from vmsched_api.deps import ServicesDep
from vmsched_api.group_store import GroupHasMembers, GroupWithMembers, ServerGroupStore
from vmsched_api.identity.auth import VmsReader, VmsWriter
from vmsched_api.refusals import refusals
from vmsched_contract.api import ServerGroup, ServerGroupRequest

router = APIRouter(prefix="/server-groups", tags=["server-groups"])


async def _store(services: ServicesDep) -> ServerGroupStore:
    return ServerGroupStore(services.engine)


StoreDep = Annotated[ServerGroupStore, Depends(_store)]


def _view(found: GroupWithMembers) -> ServerGroup:
    rule = found.group.rule
    return ServerGroup(
        id=found.group.id,
        name=found.group.name,
        policy=rule.policy,
        topology_key=rule.topology_key,
        max_per_domain=rule.max_per_domain,
        max_skew=rule.max_skew,
        max_unavailable=found.group.max_unavailable,
        members=found.members,
        created_at=found.group.created_at,
        project=found.group.project,
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ServerGroup)
async def create_server_group(
    body: ServerGroupRequest, store: StoreDep, response: Response, principal: VmsWriter
) -> ServerGroup:
    """Create a group in the token's project; its VMs join it with ``server_group: <id>`` in their request."""
    created = await store.create(
        project=principal.project,
        name=body.name,
        policy=body.policy,
        topology_key=body.topology_key,
        max_per_domain=body.max_per_domain,
        max_skew=body.max_skew,
        max_unavailable=body.max_unavailable,
    )
    response.headers["Location"] = f"/v1/server-groups/{created.group.id}"
    return _view(created)


@router.get("", response_model=list[ServerGroup])
async def list_server_groups(store: StoreDep, principal: VmsReader) -> list[ServerGroup]:
    return [_view(found) for found in await store.list(principal.project_filter(None))]


@router.get("/{group_id}", response_model=ServerGroup, responses=refusals(404))
async def get_server_group(group_id: UUID, store: StoreDep, principal: VmsReader) -> ServerGroup:
    found = await store.get(group_id, principal.project_filter(None))
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no server group {group_id}")
    return _view(found)


@router.delete("/{group_id}", status_code=status.HTTP_204_NO_CONTENT, responses=refusals(404, 409))
async def delete_server_group(group_id: UUID, store: StoreDep, principal: VmsWriter) -> Response:
    """Delete an empty group: 409 while any of its VMs is not deleted."""
    try:
        deleted = await store.delete(group_id, principal.project_filter(None))
    except GroupHasMembers as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    if not deleted:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no server group {group_id}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
