"""The API's request checking, in process over FastAPI's ASGI transport, without servers: bad input
is refused with 422 naming the field and the reason before anything is touched."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from vmsched_api.app import build_app
from vmsched_api.deps import Services
from vmsched_common.settings import Settings


class Untouchable:
    """A stand-in for every server-facing service: a request that got past validation and used one
    would fail the test loudly."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a refused request reached the services ({name})")


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    untouchable: Any = Untouchable()
    services = Services(
        settings=Settings(),
        engine=untouchable,
        repository=untouchable,
        snapshot=untouchable,
        broker=untouchable,
        publisher=untouchable,
        published=untouchable,
    )
    app = build_app(Settings(), migrate=False, services=services)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        yield client


def problems(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(".".join(str(part) for part in item["loc"]), item["type"]) for item in body["detail"]]


@pytest.mark.parametrize(
    ("vm", "field", "kind"),
    [
        ({"name": "x", "cpu": 0, "memory_mb": 1, "disk_gb": 1}, "body.cpu", "greater_than_equal"),
        ({"name": "has space", "cpu": 1, "memory_mb": 1, "disk_gb": 1}, "body.name", "string_pattern_mismatch"),
        ({"name": "x", "cpu": 1, "memory_mb": 1, "disk_gb": 1, "strategy": "fastest"}, "body.strategy", "enum"),
        ({"name": "x", "cpu": 1, "memory_mb": 1, "disk_gb": 1, "colour": "red"}, "body.colour", "extra_forbidden"),
        ({"name": "x", "cpu": 1, "disk_gb": 1}, "body.memory_mb", "missing"),
    ],
)
async def test_a_bad_vm_is_refused_naming_the_field(
    api: httpx.AsyncClient, vm: dict[str, object], field: str, kind: str
) -> None:
    response = await api.post("/v1/vms", json=vm)
    assert response.status_code == 422
    assert (field, kind) in problems(response.json())


async def test_an_empty_batch_or_one_too_large_is_refused(api: httpx.AsyncClient) -> None:
    vm = {"name": "x", "cpu": 1, "memory_mb": 1, "disk_gb": 1}
    assert problems((await api.post("/v1/vms/batch", json={"vms": []})).json()) == [("body.vms", "too_short")]
    assert problems((await api.post("/v1/vms/batch", json={"vms": [vm] * 1001})).json()) == [("body.vms", "too_long")]


async def test_a_vm_id_that_is_not_a_uuid_is_refused(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/vms/not-a-uuid")
    assert (response.status_code, problems(response.json())) == (422, [("path.vm_id", "uuid_parsing")])


async def test_liveness_answers_without_servers(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).json() == {"status": "ok"}
