"""The FastAPI dependencies every /v1 route goes through.

``authenticate`` is a dependency of the /v1 router itself, so a route added there is authenticated
whether or not it says anything (401 without a live token; 429 past the token's rate). Each route
then names the scope it needs with one of the aliases below (``principal: VmsReader``), which
``authorize`` checks (403). A /v1 route that names no scope is refused when the app is built
(:func:`check_every_route_declares_a_scope`), and a test walks the route table for both answers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.security import HTTPBearer, SecurityScopes
from starlette.routing import BaseRoute

from vmsched_api.deps import ServicesDep
from vmsched_api.identity.audit import PRINCIPAL
from vmsched_api.identity.rate_limit import retry_after_header
from vmsched_api.identity.scopes import Principal
from vmsched_api.request_phases import Phase, timed
from vmsched_contract.scopes import Scope

REALM = 'Bearer realm="vmsched"'

# Declared for the OpenAPI document (the Authorize button of /docs); authenticate reads the header.
bearer = HTTPBearer(
    scheme_name="bearerAuth",
    description="an API token: `Authorization: Bearer $VMSCHED_TOKEN` (POST /v1/tokens, or "
    "`vmsched-api create-token`; docs/security.md)",
    auto_error=False,
)


def _unauthorized(detail: str, error: str | None = None) -> HTTPException:
    challenge = REALM + (f', error="{error}"' if error else "")
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": challenge})


async def authenticate(request: Request, services: ServicesDep) -> Principal:
    """The principal of the request's bearer token (401 without a live one), within its rate (429)."""
    header = request.headers.get("authorization")
    if not header:
        raise _unauthorized("no token: send Authorization: Bearer <token>")
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise _unauthorized("the Authorization header must be: Bearer <token>", "invalid_request")
    with timed(Phase.AUTH):
        principal = await services.authenticator.principal(secret)
    if principal is None:
        raise _unauthorized("the token is unknown, expired or revoked", "invalid_token")
    setattr(request.state, PRINCIPAL, principal)
    wait = services.rate_limiter.take(principal.token_id)
    if wait > 0:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"this token's request rate is {services.rate_limiter.rate:g}/s (VMSCHED_RATE_LIMIT); retry later",
            headers={"Retry-After": retry_after_header(wait)},
        )
    return principal


async def authorize(
    security_scopes: SecurityScopes,
    principal: Annotated[Principal, Depends(authenticate)],
    _scheme: Annotated[object, Security(bearer)],
) -> Principal:
    """The authenticated principal, if it holds the scopes the route names (403 otherwise)."""
    if not security_scopes.scopes:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this route names no scope: refused to everyone")
    for needed in security_scopes.scopes:
        if not principal.may(Scope(needed)):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"the token lacks the scope {needed}",
                headers={"WWW-Authenticate": f'{REALM}, error="insufficient_scope", scope="{needed}"'},
            )
    return principal


def requires(scope: Scope) -> Any:
    return Security(authorize, scopes=[scope.value])


VmsReader = Annotated[Principal, requires(Scope.VMS_READ)]
VmsWriter = Annotated[Principal, requires(Scope.VMS_WRITE)]
HostsReader = Annotated[Principal, requires(Scope.HOSTS_READ)]
HostsAdmin = Annotated[Principal, requires(Scope.HOSTS_ADMIN)]
Admin = Annotated[Principal, requires(Scope.ADMIN)]


def _dependants(dependant: Dependant) -> Iterator[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _dependants(sub)


def required_scopes(route: APIRoute) -> list[Scope]:
    """The scopes a route names (through ``requires``)."""
    return [
        Scope(scope)
        for dependant in _dependants(route.dependant)
        if dependant.call is authorize
        for scope in dependant.own_oauth_scopes or []
    ]


def authenticates(route: APIRoute) -> bool:
    return any(dependant.call is authenticate for dependant in _dependants(route.dependant))


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # the full path template, e.g. /v1/vms/{vm_id}
    route: APIRoute


def endpoints(routes: Sequence[BaseRoute], prefix: str = "/v1") -> list[Endpoint]:
    """Every method and path under ``prefix`` the app serves, included routers' routes too."""
    found = []
    for context in iter_route_contexts(routes):
        route, path = context.original_route, context.path
        if isinstance(route, APIRoute) and path is not None and path.startswith(prefix):
            found += [Endpoint(method, path, route) for method in sorted(context.methods or ())]
    return found


def check_every_route_declares_a_scope(routes: Sequence[BaseRoute], prefix: str = "/v1") -> None:
    """Refuse to build an API with a /v1 route that is not authenticated or names no scope."""
    for endpoint in endpoints(routes, prefix):
        if not authenticates(endpoint.route) or not required_scopes(endpoint.route):
            raise RuntimeError(f"{endpoint.method} {endpoint.path} names no scope (vmsched_api.identity.auth.requires)")
