"""The API's request checking, in process over FastAPI's ASGI transport, without servers: bad input
is refused with 422 naming the field and the reason before anything is touched."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

from vmsched_api.app import build_app
from vmsched_api.deps import Services
from vmsched_api.identity.audit import AuditEntry
from vmsched_api.identity.authenticator import Authenticator
from vmsched_api.identity.rate_limit import RateLimiter
from vmsched_api.vm_acceptance import Accepted, CreateRequest, Outcome
from vmsched_api.vm_intake import VmIntake
from vmsched_contract.api import VmDefaults, VmRequest
from vmsched_contract.messages import RestartPolicy, VmToPlace
from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord
from vmsched_runtime.settings import Settings


class Untouchable:
    """A stand-in for every server-facing service: a request that got past validation and used one
    would fail the test loudly."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a refused request reached the services ({name})")


TOKEN = secrets.token_urlsafe(32)


class AuditSink:
    """The audit trail, in memory."""

    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []

    async def record(self, entry: AuditEntry) -> None:
        self.entries.append(entry)


def in_memory_services(settings: Settings, **stores: Any) -> Services:
    """The API's services with nothing behind them but ``stores``; the bootstrap token (TOKEN) is
    the only one known, and needs no store."""
    untouchable: Any = Untouchable()
    audit: Any = AuditSink()
    return Services(
        **{
            "settings": settings,
            "engine": untouchable,
            "repository": untouchable,
            "snapshot": untouchable,
            "broker": untouchable,
            "publisher": untouchable,
            "published": untouchable,
            "intake": untouchable,
            "deletes": untouchable,
            "authenticator": Authenticator(bootstrap=settings.bootstrap_token, store=untouchable),
            "rate_limiter": RateLimiter(settings.rate_limit, settings.rate_burst),
            "audit": audit,
            "tokens": untouchable,
            "projects": untouchable,
            "readiness": untouchable,
            **stores,
        }
    )


def in_process(app: Any, token: str | None = TOKEN) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api", headers=headers)


@pytest.fixture(scope="module")
async def api() -> AsyncIterator[httpx.AsyncClient]:
    """One app for the module's refusals and probes: they change nothing it holds (built per test, it
    cost a few tenths of a second each)."""
    settings = Settings(bootstrap_token=TOKEN)
    app = build_app(settings, migrate=False, services=in_memory_services(settings))
    async with in_process(app) as client:
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
        ({"name": "x", "cpu": 1, "memory_mb": 1}, "body.disk_gb", "missing"),
        ({"name": "x", "memory_mb": 0, "disk_gb": 1}, "body.memory_mb", "greater_than_equal"),
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


class Accepting:
    """The acceptance, publisher and published marks of an API that accepts VMs, in memory, behind a
    real intake: what the routes hand them is recorded."""

    def __init__(self) -> None:
        self.defaults: list[VmDefaults] = []
        self.sent: list[VmToPlace] = []
        self.intake = VmIntake(self, self, self)  # type: ignore[arg-type]

    async def accept(self, requests: Sequence[CreateRequest]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for request in requests:
            self.defaults.append(request.defaults)
            outcomes.append(Accepted([self._record(body, request.defaults) for body in request.bodies]))
        return outcomes

    async def published(self) -> list[VmToPlace]:
        """What was sent to the schedulers, once the intake's publishes (after the answers) ended."""
        await self.intake.drain()
        return self.sent

    @staticmethod
    def _record(body: VmRequest, defaults: VmDefaults) -> VmRecord:
        return VmRecord(
            id=uuid.uuid4(),
            name=body.name,
            status=VmStatus.PENDING,
            status_reason=None,
            hypervisor_id=None,
            resources=body.resources(defaults),
            labels=body.labels,
            strategy=body.strategy,
            restart_policy=RestartPolicy.NEVER,
            restart_count=0,
            attempt=1,
            failures=0,
            exclusions={},
            attempts=[],
            placement=None,
            created_at=None,
            scheduled_at=None,
            started_at=None,
            failed_at=None,
        )

    async def vm_create(self, vms: Sequence[VmToPlace]) -> None:
        self.sent.extend(vms)

    async def blocked(self) -> bool:
        return False

    async def submit(self, ids: list[str]) -> None:
        pass


@pytest.fixture(scope="module")
async def accepting_app() -> AsyncIterator[tuple[httpx.AsyncClient, Accepting]]:
    settings = Settings(default_vm_cpu=2, default_vm_memory_mb=3072, bootstrap_token=TOKEN)
    stores = Accepting()
    recording: Any = stores
    services = in_memory_services(settings, publisher=recording, published=recording, intake=stores.intake)
    app = build_app(settings, migrate=False, services=services)
    async with in_process(app) as client:
        yield client, stores


@pytest.fixture
async def accepting(accepting_app: tuple[httpx.AsyncClient, Accepting]) -> tuple[httpx.AsyncClient, Accepting]:
    """The module's accepting app (built once: a few tenths of a second each), with nothing recorded:
    what earlier tests had it record is forgotten (their publishes, which follow the answers, ended)."""
    _, stores = accepting_app
    await stores.intake.drain()
    stores.defaults.clear()
    stores.sent.clear()
    return accepting_app


async def test_a_vm_that_omits_cpu_and_memory_gets_the_default_amounts(
    accepting: tuple[httpx.AsyncClient, Accepting],
) -> None:
    api, stores = accepting
    response = await api.post("/v1/vms", json={"name": "plain", "disk_gb": 10})
    assert response.status_code == 202, response.text
    assert (response.json()["cpu"], response.json()["memory_mb"]) == (2, 3072)  # this API's settings
    assert stores.defaults == [VmDefaults(cpu=2, memory_mb=3072)]
    (sent,) = await stores.published()
    assert (sent.resources.cpu, sent.resources.memory_mb, sent.resources.disk_gb) == (2, 3072, 10)


async def test_a_vm_keeps_what_it_asks_for_and_takes_the_default_only_for_what_it_omits(
    accepting: tuple[httpx.AsyncClient, Accepting],
) -> None:
    api, _ = accepting
    only_cpu = (await api.post("/v1/vms", json={"name": "a", "cpu": 8, "disk_gb": 1})).json()
    only_memory = (await api.post("/v1/vms", json={"name": "b", "memory_mb": 512, "disk_gb": 1})).json()
    assert (only_cpu["cpu"], only_cpu["memory_mb"]) == (8, 3072)
    assert (only_memory["cpu"], only_memory["memory_mb"]) == (2, 512)


async def test_a_batch_takes_the_defaults_per_vm(accepting: tuple[httpx.AsyncClient, Accepting]) -> None:
    api, stores = accepting
    vms = [{"name": "d1", "disk_gb": 1}, {"name": "d2", "cpu": 1, "memory_mb": 256, "disk_gb": 1}]
    response = await api.post("/v1/vms/batch", json={"vms": vms})
    assert response.status_code == 202, response.text
    assert [(vm["cpu"], vm["memory_mb"]) for vm in response.json()["items"]] == [(2, 3072), (1, 256)]
    assert [(vm.resources.cpu, vm.resources.memory_mb) for vm in await stores.published()] == [(2, 3072), (1, 256)]


def test_the_default_amounts_are_orchards_unless_set() -> None:
    assert VmDefaults.of(Settings()) == VmDefaults(cpu=4, memory_mb=8192)


async def test_a_wait_out_of_bounds_is_refused_naming_the_field(
    accepting: tuple[httpx.AsyncClient, Accepting],
) -> None:
    api, stores = accepting
    for wait_s in (-1, 7 * 24 * 3600 + 1):
        response = await api.post("/v1/vms", json={"name": "w", "disk_gb": 1, "wait_s": wait_s})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "wait_s"]
    assert await stores.published() == []


async def test_an_all_or_nothing_batch_that_would_wait_is_refused(
    accepting: tuple[httpx.AsyncClient, Accepting],
) -> None:
    api, stores = accepting
    body = {"all_or_nothing": True, "vms": [{"name": "a", "disk_gb": 1}, {"name": "b", "disk_gb": 1, "wait_s": 30}]}
    response = await api.post("/v1/vms/batch", json=body)
    assert response.status_code == 422
    assert "wait_s" in response.text
    assert await stores.published() == []


@pytest.mark.parametrize(
    ("extra", "field", "kind"),
    [
        ({"fpga": 0}, "body.extra.fpga", "greater_than_equal"),
        ({"fpga": -1}, "body.extra.fpga", "greater_than_equal"),
        ({"fpga": 1_000_001}, "body.extra.fpga", "less_than_equal"),
        ({"fpga": "two"}, "body.extra.fpga", "int_parsing"),
        ({"FPGA": 1}, "body.extra.FPGA.[key]", "value_error"),
        ({"has space": 1}, "body.extra.has space.[key]", "value_error"),
        ({"a/b/c": 1}, "body.extra.a/b/c.[key]", "value_error"),
        ({"x" * 64: 1}, f"body.extra.{'x' * 64}.[key]", "value_error"),
        ({"": 1}, "body.extra..[key]", "string_too_short"),
        ({"gpu": 1}, "body.extra.gpu.[key]", "value_error"),
        ({f"r{i}": 1 for i in range(17)}, "body.extra", "too_long"),
        (["fpga"], "body.extra", "dict_type"),
    ],
)
async def test_a_bad_extra_resource_is_refused_naming_the_field(
    accepting: tuple[httpx.AsyncClient, Accepting], extra: object, field: str, kind: str
) -> None:
    api, stores = accepting
    vm = {"name": "x", "disk_gb": 1, "extra": extra}
    single = await api.post("/v1/vms", json=vm)
    assert single.status_code == 422
    assert (field, kind) in problems(single.json())
    batch = await api.post("/v1/vms/batch", json={"vms": [{"name": "ok", "disk_gb": 1}, vm]})
    assert batch.status_code == 422
    assert (field.replace("body.", "body.vms.1.", 1), kind) in problems(batch.json())
    assert await stores.published() == []


async def test_a_vm_asking_for_extra_resources_shows_them_and_sends_them_to_the_schedulers(
    accepting: tuple[httpx.AsyncClient, Accepting],
) -> None:
    api, stores = accepting
    asked = {"fpga": 2, "example.com/ssd-cache": 1}
    response = await api.post("/v1/vms", json={"name": "accel", "disk_gb": 1, "extra": asked})
    assert response.status_code == 202, response.text
    assert response.json()["extra"] == asked
    plain = await api.post("/v1/vms", json={"name": "plain", "disk_gb": 1})
    assert plain.json()["extra"] == {}
    accel, without = await stores.published()
    assert (accel.resources.extra, without.resources.extra) == (asked, {})
    # What vm.create carries, and therefore what a retry of it asks for again.
    assert VmToPlace.model_validate_json(accel.model_dump_json()).resources.extra == asked


def test_the_idempotency_hash_of_a_request_without_extras_is_what_it_was_before_them() -> None:
    body = VmRequest.model_validate({"name": "x", "cpu": 1, "memory_mb": 1, "disk_gb": 1})
    assert "extra" not in body.model_dump()
    assert VmRequest.model_validate({**body.model_dump(), "extra": {"fpga": 1}}).model_dump()["extra"] == {"fpga": 1}
