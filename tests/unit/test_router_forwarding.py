"""The router's create and list paths against fake cells (httpx's MockTransport), without servers:
which cell is asked, when a VM a cell refused is deleted there, what the caller is answered."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from vmsched_contract.cells import CellSummary, LabelSetSummary
from vmsched_router.cells import Cell, CellTable
from vmsched_router.routing import Router, decode_cursor, encode_cursor
from vmsched_router.store import RouteStore
from vmsched_runtime.settings import CellEndpoint, Settings

HEADERS = {"authorization": "Bearer t", "content-type": "application/json"}
BODY = json.dumps({"name": "x", "cpu": 1, "memory_mb": 512, "disk_gb": 1}).encode()


class MemoryRoutes(RouteStore):
    def __init__(self) -> None:
        self.routes: dict[str, str] = {}

    async def record(self, keys: list[str], cell: str) -> None:
        for key in keys:
            self.routes.setdefault(key, cell)

    async def cell_of(self, key: str) -> str | None:
        return self.routes.get(key)


def summary(load: float) -> CellSummary:
    free = round(100 * (1 - load))
    amounts = {"cpu": free, "memory_mb": free * 1024, "disk_gb": 1000, "gpu": 0}
    return CellSummary(
        hosts=1,
        schedulable_hosts=1,
        allocatable={"cpu": 100, "memory_mb": 102400, "disk_gb": 1000, "gpu": 0},
        free=amounts,
        waiting=0,
        label_sets=[LabelSetSummary(labels={}, hosts=1, free=amounts, largest=amounts)],
    )


class FakeCell:
    """A cell API that places or refuses every VM (``verdict``), or answers ``refusal``."""

    def __init__(self, name: str, verdict: str = "scheduled", refusal: int | None = None, down: bool = False) -> None:
        self.name = name
        self.verdict = verdict
        self.refusal = refusal
        self.down = down
        self.vms: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.asked: list[str] = []

    def vm(self, body: dict[str, Any]) -> dict[str, Any]:
        vm = {"id": str(uuid.uuid4()), "name": body["name"], "status": "pending", "created_at": "2026-11-26T00:00:00"}
        self.vms[vm["id"]] = vm
        return vm

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(f"{request.method} {request.url.path}")
        if self.down:
            raise httpx.ConnectError("down", request=request)
        if self.refusal is not None and request.method == "POST":
            return httpx.Response(self.refusal, json={"detail": "no"})
        path = request.url.path
        if request.method == "POST" and path == "/v1/vms":
            return httpx.Response(202, json=self.vm(json.loads(request.content)))
        if request.method == "POST" and path == "/v1/vms/batch":
            return httpx.Response(202, json={"items": [self.vm(vm) for vm in json.loads(request.content)["vms"]]})
        if path == "/v1/vms":
            return self.page(request)
        vm_id = path.rsplit("/", 1)[-1]
        if vm_id not in self.vms:
            return httpx.Response(404, json={"detail": "no"})
        if request.method == "DELETE":
            self.deleted.append(vm_id)
            self.vms[vm_id]["status"] = "deleted"
        elif self.vms[vm_id]["status"] == "pending":
            self.vms[vm_id]["status"] = self.verdict
        return httpx.Response(200, json=self.vms[vm_id])

    def page(self, request: httpx.Request) -> httpx.Response:
        ids = sorted(self.vms)
        start = int(request.url.params.get("cursor") or 0)
        limit = int(request.url.params.get("limit", "100"))
        shown = ids[start : start + limit]
        following = str(start + limit) if start + limit < len(ids) else None
        return httpx.Response(200, json={"items": [self.vms[i] for i in shown], "next_cursor": following})


def router_of(*cells: FakeCell, loads: dict[str, float] | None = None, **settings: Any) -> Router:
    table = CellTable()
    for fake in cells:
        endpoint = CellEndpoint.model_validate({"name": fake.name, "url": f"http://{fake.name}", "token": "t"})
        handler: Callable[[httpx.Request], httpx.Response] = fake.handle
        client = httpx.AsyncClient(base_url=endpoint.base_url, transport=httpx.MockTransport(handler))
        table.cells[fake.name] = Cell(endpoint, client, summary=summary((loads or {}).get(fake.name, 0.0)))
    return Router(Settings(**{"router_decision_wait": 1.0, **settings}), table, MemoryRoutes())


async def test_a_vm_one_cell_refuses_is_placed_by_the_next_and_deleted_in_the_first() -> None:
    a, b = FakeCell("a", verdict="unschedulable"), FakeCell("b")
    router = router_of(a, b, loads={"a": 0.1, "b": 0.5})
    answer = await router.create_vm(BODY, HEADERS)
    assert answer.status_code == 202
    assert answer.headers["X-Vmsched-Cell"] == "b"
    # The last cell to try is not waited on: nothing is left to try after it.
    assert json.loads(bytes(answer.body))["id"] in b.vms
    assert a.deleted == list(a.vms)
    assert router.store.routes == {f"vm:{vm_id}": name for name, cell in (("a", a), ("b", b)) for vm_id in cell.vms}  # type: ignore[attr-defined]


async def test_when_the_next_cell_refuses_the_first_cells_answer_stands_and_nothing_is_deleted() -> None:
    a, b = FakeCell("a", verdict="unschedulable"), FakeCell("b", refusal=403)
    answer = await router_of(a, b, loads={"a": 0.1, "b": 0.5}).create_vm(BODY, HEADERS)
    assert (answer.status_code, answer.headers["X-Vmsched-Cell"]) == (202, "a")
    assert json.loads(bytes(answer.body))["status"] == "unschedulable"
    assert a.deleted == []


async def test_a_cell_that_does_not_answer_is_passed_for_the_next() -> None:
    a, b = FakeCell("a", down=True), FakeCell("b")
    answer = await router_of(a, b, loads={"a": 0.1, "b": 0.5}).create_vm(BODY, HEADERS)
    assert (answer.status_code, answer.headers["X-Vmsched-Cell"]) == (202, "b")


async def test_without_a_decision_wait_the_first_cells_answer_is_the_callers() -> None:
    a, b = FakeCell("a", verdict="unschedulable"), FakeCell("b")
    answer = await router_of(a, b, loads={"a": 0.1, "b": 0.5}, router_decision_wait=0).create_vm(BODY, HEADERS)
    assert (answer.status_code, answer.headers["X-Vmsched-Cell"]) == (202, "a")
    assert a.asked == ["POST /v1/vms"]
    assert b.asked == []


async def test_a_request_the_cell_refuses_is_answered_as_the_cell_answered() -> None:
    a = FakeCell("a", refusal=422)
    answer = await router_of(a).create_vm(b"not json", HEADERS)
    assert answer.status_code == 422


async def test_no_cell_up_is_a_503() -> None:
    router = router_of(FakeCell("a"))
    router.table.cells["a"].summary = None
    assert (await router.create_vm(BODY, HEADERS)).status_code == 503


async def test_the_vms_of_every_cell_are_listed_page_by_page() -> None:
    a, b = FakeCell("a"), FakeCell("b")
    for cell, count in ((a, 3), (b, 1)):
        for i in range(count):
            cell.vm({"name": f"{cell.name}{i}"})
    router = router_of(a, b)
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(5):
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = json.loads(bytes((await router.list_vms(HEADERS, params)).body))
        seen += [vm["name"] for vm in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == ["a0", "a1", "a2", "b0"]


def test_a_cursor_carries_each_cells_position_and_a_new_cell_starts() -> None:
    cursor = encode_cursor({"a": "7", "b": None})
    assert decode_cursor(cursor, ["a", "b", "c"]) == {"a": "7", "b": None, "c": ""}
    assert decode_cursor(None, ["a"]) == {"a": ""}
    with pytest.raises(ValueError, match="not a cursor"):
        decode_cursor("!!!", ["a"])
