"""/v1/audit: the audit trail of mutating requests (admin), newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from vmsched_api.deps import ServicesDep
from vmsched_api.identity.auth import Admin
from vmsched_contract.api import AuditPage, AuditRecord
from vmsched_contract.messages import ProjectName

router = APIRouter(prefix="/audit", tags=["audit"])


@router.get("", response_model=AuditPage)
async def list_audit(
    services: ServicesDep,
    _: Admin,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=18)] = None,
    project: Annotated[ProjectName | None, Query()] = None,
    token_id: Annotated[str | None, Query(max_length=64)] = None,
) -> AuditPage:
    before = None
    if cursor is not None:
        if not cursor.isdigit():
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                [{"loc": ["query", "cursor"], "msg": "not a cursor from a previous page", "type": "value_error"}],
            )
        before = int(cursor)
    entries, next_before = await services.audit.page(limit=limit, before=before, project=project, token_id=token_id)
    return AuditPage(
        items=[
            AuditRecord(
                id=entry.id or 0,
                at=entry.at,
                token_id=entry.token_id,
                project=entry.project,
                action=entry.action,
                target=entry.target,
                status=entry.status,
            )
            for entry in entries
        ],
        next_cursor=None if next_before is None else str(next_before),
    )
