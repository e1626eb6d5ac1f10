"""/v1/tokens: API tokens (admin). A token's secret is shown once, in the answer that creates it."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, HTTPException, Query, Response, status

from vmsched_api.deps import ServicesDep
from vmsched_api.identity.auth import Admin
from vmsched_api.identity.store import TokenRecord, UnknownProject
from vmsched_api.refusals import refusals
from vmsched_contract.api import Token, TokenCreated, TokenRequest
from vmsched_contract.messages import ProjectName
from vmsched_runtime.logs import get_logger

router = APIRouter(prefix="/tokens", tags=["tokens"])
log = get_logger("vmsched_api")


def _view(record: TokenRecord) -> Token:
    return Token(
        id=record.id,
        name=record.name,
        project=record.project,
        scopes=list(record.scopes),
        created_at=record.created_at,
        expires_at=record.expires_at,
        revoked_at=record.revoked_at,
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
async def create_token(body: TokenRequest, services: ServicesDep, response: Response, principal: Admin) -> TokenCreated:
    """Make a token of a project with some scopes; the answer holds its secret, which nothing keeps."""
    try:
        record, secret = await services.tokens.create(
            name=body.name, project=body.project, scopes=body.scopes, expires_at=body.expires_at
        )
    except UnknownProject:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["body", "project"], "msg": f"no project {body.project}", "type": "unknown_project"}],
        ) from None
    log.info("token created", token_id=str(record.id), project=record.project, by=principal.token_id)
    response.headers["Location"] = f"/v1/tokens/{record.id}"
    return TokenCreated(**_view(record).model_dump(), token=secret)


@router.get("", response_model=list[Token])
async def list_tokens(
    services: ServicesDep, _: Admin, project: Annotated[ProjectName | None, Query()] = None
) -> list[Token]:
    """Every token (revoked ones too), oldest first; never a secret."""
    return [_view(record) for record in await services.tokens.list(project)]


@router.get("/{token_id}", response_model=Token, responses=refusals(404))
async def get_token(token_id: UUID, services: ServicesDep, _: Admin) -> Token:
    record = await services.tokens.get(token_id)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no token {token_id}")
    return _view(record)


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT, responses=refusals(404))
async def revoke_token(token_id: UUID, services: ServicesDep, principal: Admin) -> Response:
    """Revoke a token: refused from now on by every API replica (they hear of it through PostgreSQL)."""
    if not await services.tokens.revoke(token_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no token {token_id}")
    services.authenticator.forget(str(token_id))
    log.info("token revoked", token_id=str(token_id), by=principal.token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
