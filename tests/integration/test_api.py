"""The HTTP API on the real stack: validation, idempotency, listing, settings, hosts."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.servers import Servers

GOOD = {"name": "api-test", "cpu": 1, "memory_mb": 512, "disk_gb": 1, "labels": {"suite": "nowhere"}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**GOOD, "cpu": 0}, "cpu"),
        ({**GOOD, "memory_mb": -1}, "memory_mb"),
        ({**GOOD, "disk_gb": "lots"}, "disk_gb"),
        ({**GOOD, "name": ""}, "name"),
        ({**GOOD, "name": "has spaces"}, "name"),
        ({**GOOD, "strategy": "fastest"}, "strategy"),
        ({**GOOD, "restart_policy": "always"}, "restart_policy"),
        ({**GOOD, "colour": "blue"}, "colour"),
        ({k: v for k, v in GOOD.items() if k != "disk_gb"}, "disk_gb"),
        ({**GOOD, "host_selector": [{"key": "zone", "operator": "In"}]}, "values"),
        ({**GOOD, "host_selector": [{"key": "zone", "operator": "NotIn", "values": []}]}, "values"),
        ({**GOOD, "host_selector": [{"key": "zone", "operator": "Exists", "values": ["z1"]}]}, "values"),
        ({**GOOD, "host_selector": [{"key": "zone", "operator": "DoesNotExist", "values": ["z1"]}]}, "values"),
        ({**GOOD, "host_selector": [{"key": "zone", "operator": "Near", "values": ["z1"]}]}, "operator"),
        ({**GOOD, "host_selector": [{"key": "", "operator": "Exists"}]}, "key"),
        ({**GOOD, "host_selector": [{"operator": "Exists"}]}, "key"),
        ({**GOOD, "host_selector": [{"key": "zone", "operator": "Exists", "value": "z1"}]}, "value"),
        ({**GOOD, "host_selector": {"zone": "z1"}}, "host_selector"),
    ],
)
def test_bad_input_is_a_422_naming_the_field_and_changes_nothing(
    api: httpx.Client, body: dict[str, object], field: str
) -> None:
    before = _every_vm("id", api)
    response = api.post("/v1/vms", json=body)
    assert response.status_code == 422
    errors = response.json()["detail"]
    assert any(error["loc"][-1] == field for error in errors), errors
    assert all(error["msg"] for error in errors)
    # No VM was made (other tests' VMs may change status meanwhile: their hosts fall silent).
    assert _every_vm("id", api) == before


def test_an_unknown_strategy_lists_the_valid_ones(api: httpx.Client) -> None:
    response = api.post("/v1/vms", json={**GOOD, "strategy": "fastest"})
    message = response.json()["detail"][0]["msg"]
    for valid in ("least_loaded", "best_fit", "round_robin", "random", "least_utilized"):
        assert valid in message


def test_a_batch_with_one_bad_vm_creates_none(api: httpx.Client) -> None:
    name = f"batch-{uuid.uuid4().hex[:8]}"
    response = api.post("/v1/vms/batch", json={"vms": [{**GOOD, "name": name}, {**GOOD, "cpu": -5}]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:4] == ["body", "vms", 1, "cpu"]
    assert name not in _every_vm_name(api)


def _every_vm_name(api: httpx.Client) -> set[str]:
    return _every_vm("name", api)


def _every_vm(field: str, api: httpx.Client) -> set[str]:
    """``field`` of every VM, every page read."""
    values: set[str] = set()
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/vms", params=params).json()
        values.update(vm[field] for vm in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return values


def test_the_same_idempotency_key_returns_the_same_vm(api: httpx.Client) -> None:
    key = f"key-{uuid.uuid4()}"
    first = api.post("/v1/vms", json=GOOD, headers={"Idempotency-Key": key})
    second = api.post("/v1/vms", json=GOOD, headers={"Idempotency-Key": key})
    assert first.status_code == second.status_code == 202
    assert first.json()["id"] == second.json()["id"]
    assert second.headers.get("Idempotent-Replayed") == "true"


def test_an_idempotency_key_reused_for_another_body_is_a_conflict(api: httpx.Client) -> None:
    key = f"key-{uuid.uuid4()}"
    assert api.post("/v1/vms", json=GOOD, headers={"Idempotency-Key": key}).status_code == 202
    response = api.post("/v1/vms", json={**GOOD, "cpu": 2}, headers={"Idempotency-Key": key})
    assert response.status_code == 409
    assert key in response.json()["detail"]


def test_a_vm_without_cpu_and_memory_is_stored_with_the_default_amounts(api: httpx.Client) -> None:
    plain = {k: v for k, v in GOOD.items() if k not in ("cpu", "memory_mb")}
    key = f"key-{uuid.uuid4()}"
    created = api.post("/v1/vms", json=plain, headers={"Idempotency-Key": key})
    assert created.status_code == 202, created.text
    stored = api.get(f"/v1/vms/{created.json()['id']}").json()
    assert (stored["cpu"], stored["memory_mb"], stored["disk_gb"]) == (4, 8192, 1)
    # The same body again is the same request, though it named no amounts.
    again = api.post("/v1/vms", json=plain, headers={"Idempotency-Key": key})
    assert (again.json()["id"], again.headers.get("Idempotent-Replayed")) == (created.json()["id"], "true")

    batch = api.post("/v1/vms/batch", json={"vms": [{**plain, "name": "d-1"}, {**plain, "name": "d-2", "cpu": 2}]})
    assert batch.status_code == 202, batch.text
    for vm, cpu in zip(batch.json()["items"], (4, 2), strict=True):
        assert (api.get(f"/v1/vms/{vm['id']}").json()["cpu"], vm["memory_mb"]) == (cpu, 8192)


def test_a_host_selector_is_stored_and_shown_as_asked(api: httpx.Client) -> None:
    selector = [
        {"key": "zone", "operator": "In", "values": ["z1", "z2"]},
        {"key": "gpu-model", "operator": "DoesNotExist", "values": []},
    ]
    created = api.post("/v1/vms", json={**GOOD, "host_selector": selector})
    assert created.status_code == 202, created.text
    assert created.json()["host_selector"] == selector
    assert api.get(f"/v1/vms/{created.json()['id']}").json()["host_selector"] == selector
    batch = api.post("/v1/vms/batch", json={"vms": [{**GOOD, "name": "s-1", "host_selector": selector}, GOOD]})
    assert batch.status_code == 202, batch.text
    stored = [api.get(f"/v1/vms/{vm['id']}").json()["host_selector"] for vm in batch.json()["items"]]
    assert stored == [selector, []]


def test_a_bad_host_selector_term_names_its_place_and_the_operator(api: httpx.Client) -> None:
    terms = [{"key": "zone", "operator": "Exists"}, {"key": "zone", "operator": "In", "values": []}]
    response = api.post("/v1/vms/batch", json={"vms": [GOOD, {**GOOD, "host_selector": terms}]})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "vms", 1, "host_selector", 1, "values"]
    assert "operator In needs at least one value" in error["msg"]


def test_unknown_ids_are_404(api: httpx.Client) -> None:
    missing = uuid.uuid4()
    assert api.get(f"/v1/vms/{missing}").status_code == 404
    assert api.delete(f"/v1/vms/{missing}").status_code == 404
    assert api.get(f"/v1/vms/{missing}/placement").status_code == 404
    assert api.get("/v1/hosts/no-such-host").status_code == 404
    assert api.patch("/v1/hosts/no-such-host", json={"scheduling_paused": True}).status_code == 404
    assert api.get("/v1/vms/not-a-uuid").status_code == 422


def test_listing_pages_through_every_vm_once_in_creation_order(api: httpx.Client) -> None:
    created = api.post("/v1/vms/batch", json={"vms": [{**GOOD, "name": f"page-{i}"} for i in range(7)]})
    assert created.status_code == 202
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = api.get("/v1/vms", params=params).json()
        seen += [vm["id"] for vm in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert {vm["id"] for vm in created.json()["items"]} <= set(seen)


def test_listing_filters_by_status(api: httpx.Client) -> None:
    page = api.get("/v1/vms", params={"status": "deleted", "limit": 1000}).json()
    assert all(vm["status"] == "deleted" for vm in page["items"])
    assert api.get("/v1/vms", params={"status": "sleeping"}).status_code == 422
    assert api.get("/v1/vms", params={"cursor": "garbage"}).status_code == 422
    assert api.get("/v1/vms", params={"limit": 0}).status_code == 422


def test_the_default_strategy_can_be_changed_at_runtime(api: httpx.Client) -> None:
    assert api.get("/v1/settings/scheduler").json()["default_strategy"] in ("least_loaded", "best_fit")
    try:
        changed = api.put("/v1/settings/scheduler", json={"default_strategy": "best_fit"})
        assert changed.status_code == 200
        assert api.get("/v1/settings/scheduler").json() == {"default_strategy": "best_fit", "source": "runtime"}
        bad = api.put("/v1/settings/scheduler", json={"default_strategy": "fastest"})
        assert bad.status_code == 422
        assert "round_robin" in bad.json()["detail"][0]["msg"]
    finally:
        api.put("/v1/settings/scheduler", json={"default_strategy": "least_loaded"})


def test_health_readiness_docs_and_metrics_answer(api: httpx.Client) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").json() == {"database": "ok", "redis": "ok", "broker": "ok"}
    assert "/v1/vms" in api.get("/openapi.json").json()["paths"]
    assert api.get("/docs").status_code == 200
    assert "vm.create" in api.get("/asyncapi.json").text or api.get("/asyncapi").status_code == 200
    assert "vmsched_" in api.get("/metrics").text


def test_servers_fixture_isolated_this_run(servers: Servers) -> None:
    assert servers.run_id in servers.redis_key_prefix
