"""Every /v1 route, found by walking the app's route table: 401 without a token (with the
WWW-Authenticate challenge), 403 with a live token that lacks the route's scope. A route added
tomorrow is walked too: if it forgot to authenticate, or to name its scope, this fails (and the
app refuses to build). In process, without servers: no refused request reaches a store."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends
from starlette.routing import Mount, Route

from tests.unit.test_api_requests import TOKEN, AuditSink, in_memory_services, in_process
from vmsched_api.app import build_app
from vmsched_api.identity.auth import (
    VmsReader,
    authenticate,
    check_every_route_declares_a_scope,
    endpoints,
    required_scopes,
)
from vmsched_api.identity.authenticator import Authenticator
from vmsched_api.identity.scopes import GRANTED_BY, Principal
from vmsched_api.identity.store import TokenRecord
from vmsched_api.identity.token_secrets import new_secret, secret_hash
from vmsched_contract.scopes import Scope
from vmsched_runtime.settings import Settings


class ScopedTokens:
    """A token store that knows one token per set of scopes, made on demand."""

    def __init__(self) -> None:
        self.by_hash: dict[str, TokenRecord] = {}

    def secret_for(self, scopes: frozenset[Scope]) -> str:
        secret = new_secret()
        self.by_hash[secret_hash(secret)] = TokenRecord(
            id=uuid.uuid4(),
            name="walker",
            project="walk",
            scopes=tuple(scopes),
            created_at=datetime.now(UTC),
            expires_at=None,
            revoked_at=None,
        )
        return secret

    async def live_token(self, hashed: str) -> TokenRecord | None:
        return self.by_hash.get(hashed)


@pytest.fixture
async def walk() -> AsyncIterator[tuple[Any, httpx.AsyncClient, ScopedTokens, AuditSink]]:
    settings = Settings(bootstrap_token=TOKEN)
    tokens = ScopedTokens()
    audit = AuditSink()
    store: Any = tokens
    services = in_memory_services(
        settings, authenticator=Authenticator(bootstrap=settings.bootstrap_token, store=store), audit=audit
    )
    app = build_app(settings, migrate=False, services=services)
    async with in_process(app, token=None) as client:
        yield app, client, tokens, audit


def concrete(path: str) -> str:
    # A UUID suits every path parameter: VM, group and token ids, host ids, project names.
    return re.sub(r"\{[^}]+\}", lambda _: str(uuid.uuid4()), path)


async def test_every_v1_route_refuses_a_request_without_a_token_or_without_its_scope(
    walk: tuple[Any, httpx.AsyncClient, ScopedTokens, AuditSink],
) -> None:
    app, client, tokens, _ = walk
    walking = endpoints(app._application.routes)
    walked = {(endpoint.method, endpoint.path) for endpoint in walking}
    assert {
        ("POST", "/v1/vms"),
        ("PATCH", "/v1/hosts/{host_id}"),
        ("DELETE", "/v1/tokens/{token_id}"),
        ("POST", "/v1/vms/{vm_id}/migrate"),
        ("POST", "/v1/vms/{vm_id}/stop"),
        ("POST", "/v1/vms/{vm_id}/start"),
        ("POST", "/v1/reservations"),
        ("GET", "/v1/reservations"),
        ("GET", "/v1/reservations/{reservation_id}"),
        ("DELETE", "/v1/reservations/{reservation_id}"),
        ("GET", "/v1/summary"),
        ("GET", "/v1/rebalance/plans"),
    } <= walked
    assert len(walking) >= 25, walked
    for endpoint in walking:
        scopes = required_scopes(endpoint.route)
        assert len(scopes) == 1, f"{endpoint.method} {endpoint.path} names {scopes}"
        (needed,) = scopes
        path = concrete(endpoint.path)
        anonymous = await client.request(endpoint.method, path)
        assert anonymous.status_code == 401, (endpoint, anonymous.text)
        assert anonymous.headers["WWW-Authenticate"].startswith("Bearer"), endpoint
        wrong = await client.request(endpoint.method, path, headers={"Authorization": "Bearer vmsched_not-a-token"})
        assert (wrong.status_code, wrong.headers["WWW-Authenticate"]) == (
            401,
            'Bearer realm="vmsched", error="invalid_token"',
        ), endpoint
        lacking = tokens.secret_for(frozenset(Scope) - GRANTED_BY[needed])
        refused = await client.request(endpoint.method, path, headers={"Authorization": f"Bearer {lacking}"})
        assert refused.status_code == 403, (endpoint, refused.text)
        assert f'scope="{needed.value}"' in refused.headers["WWW-Authenticate"], endpoint


# Everything served outside /v1: open to all on purpose, as none of it holds the fleet's data.
PUBLIC_ROUTES = {
    "/healthz",
    "/readyz",
    "/metrics",  # probes and Prometheus
    "/openapi.json",
    "/docs",
    "/asyncapi",
    "/asyncapi.json",
    "/asyncapi.yaml",  # what the API and its events are
    "/ui",  # the dashboard: a static page that asks for a token and reads /v1 with it
}
PUBLIC_ASSETS = {"/static/swagger-ui", "/static/asyncapi", "/static/ui"}  # those pages' files


def test_every_route_outside_v1_is_one_listed_as_public() -> None:
    routes = build_app(Settings(), migrate=False)._application.routes
    served = {endpoint.path for endpoint in endpoints(routes, prefix="/") if not endpoint.path.startswith("/v1")}
    served |= {route.path for route in routes if type(route) is Route}  # /openapi.json
    assert served == PUBLIC_ROUTES
    assert {route.path for route in routes if isinstance(route, Mount)} == PUBLIC_ASSETS


async def test_open_routes_need_no_token(walk: tuple[Any, httpx.AsyncClient, ScopedTokens, AuditSink]) -> None:
    _, client, _, _ = walk
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/openapi.json")).status_code == 200
    dashboard = await client.get("/ui")
    assert (dashboard.status_code, dashboard.headers["content-type"]) == (200, "text/html; charset=utf-8")
    assert (await client.get("/static/ui/dashboard.js")).headers["content-type"].startswith("text/javascript")


def test_an_app_with_a_v1_route_that_names_no_scope_or_skips_authentication_is_refused() -> None:
    async def endpoint() -> None: ...

    async def scoped(_: VmsReader) -> None: ...

    forgetful = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])
    forgetful.add_api_route("/new", endpoint, methods=["GET"])
    with pytest.raises(RuntimeError, match="GET /v1/new names no scope"):
        check_every_route_declares_a_scope(forgetful.routes)
    unauthenticated = APIRouter(prefix="/v1")
    unauthenticated.add_api_route("/other", endpoint, methods=["POST"])
    with pytest.raises(RuntimeError, match="POST /v1/other"):
        check_every_route_declares_a_scope(unauthenticated.routes)
    fine = APIRouter(prefix="/v1", dependencies=[Depends(authenticate)])
    fine.add_api_route("/fine", scoped, methods=["GET"])
    check_every_route_declares_a_scope(fine.routes)


def test_the_openapi_document_names_the_bearer_scheme_and_each_operations_scope() -> None:
    app = build_app(Settings(), migrate=False)
    document = app._application.openapi()
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    assert document["paths"]["/v1/vms"]["post"]["security"] == [{"bearerAuth": ["vms:write"]}]
    assert document["paths"]["/v1/tokens"]["post"]["security"] == [{"bearerAuth": ["admin"]}]
    reservations = document["paths"]["/v1/reservations"]
    assert reservations["post"]["security"] == [{"bearerAuth": ["admin"]}]
    assert reservations["get"]["security"] == [{"bearerAuth": ["vms:read"]}]
    assert document["paths"]["/v1/reservations/{reservation_id}"]["delete"]["security"] == [{"bearerAuth": ["admin"]}]
    assert "security" not in document["paths"]["/readyz"]["get"]


async def test_a_token_past_its_rate_gets_429_with_retry_after() -> None:
    settings = Settings(bootstrap_token=TOKEN, rate_limit=0.001, rate_burst=2)
    app = build_app(settings, migrate=False, services=in_memory_services(settings))
    async with in_process(app) as client:
        answers = [await client.get("/v1/vms/not-a-uuid") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [422, 422, 429]
    assert int(answers[2].headers["Retry-After"]) >= 1


async def test_a_body_over_the_cap_is_refused_with_413_before_anything_is_touched() -> None:
    settings = Settings(bootstrap_token=TOKEN, max_body_bytes=4096)
    app = build_app(settings, migrate=False, services=in_memory_services(settings))
    vm = {"name": "x", "cpu": 1, "memory_mb": 1, "disk_gb": 1, "labels": {f"k{i}": "v" * 200 for i in range(30)}}
    async with in_process(app) as client:
        answer = await client.post("/v1/vms", json=vm)

        async def streamed() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b" " * 1024

        chunked = await client.post("/v1/vms", content=streamed(), headers={"content-type": "application/json"})
    assert (answer.status_code, chunked.status_code) == (413, 413)


async def test_the_audit_trail_records_every_mutating_request_once_with_its_outcome(
    walk: tuple[Any, httpx.AsyncClient, ScopedTokens, AuditSink],
) -> None:
    _, client, tokens, audit = walk
    reader = tokens.secret_for(frozenset({Scope.VMS_READ}))
    vm_id = uuid.uuid4()
    await client.delete(f"/v1/vms/{vm_id}")
    await client.delete(f"/v1/vms/{vm_id}", headers={"Authorization": f"Bearer {reader}"})
    await client.get(f"/v1/vms/{vm_id}")  # a read: not audited
    await client.post("/v1/vms", json={"name": "bad name"}, headers={"Authorization": f"Bearer {TOKEN}"})
    reader_id = str(tokens.by_hash[secret_hash(reader)].id)
    assert [(e.token_id, e.project, e.action, e.target, e.status) for e in audit.entries] == [
        (None, None, "DELETE /v1/vms/{vm_id}", f"/v1/vms/{vm_id}", 401),
        (reader_id, "walk", "DELETE /v1/vms/{vm_id}", f"/v1/vms/{vm_id}", 403),
        ("bootstrap", "default", "POST /v1/vms", "/v1/vms", 422),
    ]


def test_principal_of_the_bootstrap_token_is_an_admin_of_the_default_project() -> None:
    from vmsched_api.identity.authenticator import BOOTSTRAP

    assert (
        Principal(token_id="bootstrap", name="bootstrap", project="default", scopes=frozenset({Scope.ADMIN}))
        == BOOTSTRAP
    )


def test_the_security_page_names_every_route_with_the_scope_it_needs() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z]+) (/v1[^`]*)` \| `([^`]+)` \|$", page, flags=re.MULTILINE))
    app = build_app(Settings(), migrate=False)
    served = {(e.method, e.path, required_scopes(e.route)[0].value) for e in endpoints(app._application.routes)}
    assert documented == served
