"""What the router does with each request: choose a cell for a new VM (trying the next when the
first answers unschedulable, before the caller is told), find the cell of an existing one, and
merge lists over every cell. The HTTP routes (``app``) are a thin shell around this."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import Response, status
from fastapi.responses import JSONResponse

from vmsched_router import metrics
from vmsched_router.cells import Cell, CellTable
from vmsched_router.choice import Demand, cells_to_try, least_loaded
from vmsched_router.forwarding import CELL_HEADER, Answer, forward
from vmsched_router.store import RouteStore
from vmsched_runtime.logs import get_logger
from vmsched_runtime.settings import Settings

log = get_logger("vmsched_router")

UNSCHEDULABLE = "unschedulable"
UNDECIDED = "pending"
# First pause between two looks at a new VM's status, and the longest.
FIRST_LOOK = 0.01
LONGEST_LOOK = 0.1
# Looks at once when waiting on a batch's VMs.
CONCURRENT_LOOKS = 32
MISSING_CELLS_HEADER = "X-Vmsched-Cells-Missing"


def refusal(code: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=code)


def no_cell() -> JSONResponse:
    metrics.UNROUTABLE.inc()
    return refusal(status.HTTP_503_SERVICE_UNAVAILABLE, "no cell is reachable to take it")


def _with_body(answer: Answer, payload: Any) -> Answer:
    return Answer(answer.cell, answer.status, json.dumps(payload).encode(), answer.headers)


@dataclass
class Router:
    settings: Settings
    table: CellTable
    store: RouteStore

    # -- creating --------------------------------------------------------------------------------------

    def _demand(self, body: Mapping[str, Any]) -> Demand:
        return Demand.of(body, self.settings.default_vm_cpu, self.settings.default_vm_memory_mb)

    async def _pinned(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> list[str] | None:
        """The one cell a create must go to, if any: its server group's, or the cell that already
        holds its Idempotency-Key. None: the router chooses."""
        group = body.get("server_group")
        if group:
            cell, _ = await self.locate("group", str(group), f"/v1/server-groups/{group}", headers)
            if cell is not None:
                return [cell.name]
        key = self._idempotency_key(headers)
        if key is not None:
            name = await self.store.cell_of(key)
            if name is not None and name in self.table.cells:
                return [name]
        return None

    @staticmethod
    def _idempotency_key(headers: Mapping[str, str]) -> str | None:
        given = headers.get("idempotency-key")
        if not given:
            return None
        # Keys are the caller's own: hashed with its token, as a cell keeps them per project.
        digest = hashlib.sha256(f"{headers.get('authorization', '')}\n{given}".encode()).hexdigest()
        return f"idempotency:{digest}"

    async def create_vm(self, raw: bytes, headers: Mapping[str, str]) -> Response:
        try:
            body = json.loads(raw)
            demands = [self._demand(body)]
        except ValueError:  # the cell says what is wrong with it
            body, demands = {}, []
        tries = await self._pinned(body, headers) if body else None
        if tries is None:
            tries = cells_to_try(self.table.summaries(), demands) if demands else least_loaded(self.table.summaries())
        # A VM a cell answered unschedulable for: deleted there once another cell has taken the
        # request, or answered as it is if none does.
        passed_over: tuple[Cell, Answer] | None = None
        for attempt, name in enumerate(tries):
            cell = self.table.cells[name]
            try:
                answer = await forward(cell, "POST", "/v1/vms", headers, body=raw, route="create")
            except httpx.HTTPError as error:
                log.warning("cell did not answer a create", cell=name, error=repr(error))
                continue
            if answer.status != status.HTTP_202_ACCEPTED:
                if passed_over is not None:
                    break
                return answer.response()
            if passed_over is not None:
                await self._forget(passed_over[0], [json.loads(passed_over[1].body)["id"]], headers)
                passed_over = None
            vm = json.loads(answer.body)
            await self.store.record([f"vm:{vm['id']}"], name)
            if attempt == len(tries) - 1 or self.settings.router_decision_wait <= 0:
                return await self._kept(answer, headers)
            decided = (await self._decisions(cell, [vm], headers))[0]
            if decided["status"] != UNSCHEDULABLE:
                return await self._kept(_with_body(answer, decided), headers)
            metrics.RETRIED.labels(name).inc()
            log.info("VM unschedulable in a cell: trying the next", cell=name, vm_id=vm["id"], next=tries[attempt + 1])
            passed_over = (cell, _with_body(answer, decided))
        return await self._kept(passed_over[1], headers) if passed_over is not None else no_cell()

    async def _kept(self, answer: Answer, headers: Mapping[str, str]) -> Response:
        """The answer the caller gets; its Idempotency-Key, if any, now belongs to the answering cell
        (only now: a cell that answered unschedulable was passed over)."""
        key = self._idempotency_key(headers)
        if key is not None and answer.status == status.HTTP_202_ACCEPTED:
            await self.store.record([key], answer.cell)
        return answer.response()

    async def create_batch(self, raw: bytes, headers: Mapping[str, str]) -> Response:
        try:
            body = json.loads(raw)
            bodies: list[dict[str, Any]] = list(body["vms"])
            demands = [self._demand(vm) for vm in bodies]
        except (ValueError, KeyError, TypeError):
            body, bodies, demands = {}, [], []
        tries: list[str] | None = None
        if bodies:
            # A batch goes to one cell: its first server group's, if it names one.
            grouped = next((vm for vm in bodies if vm.get("server_group")), None)
            tries = await self._pinned(grouped, headers) if grouped else None
            if tries is None:
                tries = cells_to_try(self.table.summaries(), demands)
        else:
            tries = least_loaded(self.table.summaries())
        results: list[dict[str, Any] | None] = [None] * len(bodies)
        remaining = list(range(len(bodies)))
        accepted: Answer | None = None  # the last cell's answer that took VMs
        passed_over: tuple[Cell, list[str]] | None = None  # VMs to delete once another cell takes them
        for attempt, name in enumerate(tries):
            cell = self.table.cells[name]
            sent = raw if accepted is None else json.dumps({**body, "vms": [bodies[i] for i in remaining]}).encode()
            try:
                answer = await forward(cell, "POST", "/v1/vms/batch", headers, body=sent, route="create_batch")
            except httpx.HTTPError as error:
                log.warning("cell did not answer a batch", cell=name, error=repr(error))
                continue
            if answer.status != status.HTTP_202_ACCEPTED:
                if accepted is None:
                    return answer.response()
                break  # what an earlier cell answered stands
            if passed_over is not None:
                await self._forget(*passed_over, headers)
                passed_over = None
            accepted = answer
            items: list[dict[str, Any]] = json.loads(answer.body)["items"]
            await self.store.record([f"vm:{item['id']}" for item in items], name)
            for index, item in zip(remaining, items, strict=True):
                results[index] = item
            if attempt == len(tries) - 1 or self.settings.router_decision_wait <= 0 or not bodies:
                break
            decided = await self._decisions(cell, items, headers)
            failed = []
            for index, item in zip(remaining, decided, strict=True):
                results[index] = item
                if item["status"] == UNSCHEDULABLE:
                    failed.append(index)
            if not failed:
                break
            metrics.RETRIED.labels(name).inc(len(failed))
            log.info("VMs of a batch unschedulable in a cell: trying the next", cell=name, vms=len(failed))
            passed_over = (cell, [str(item["id"]) for item in decided if item["status"] == UNSCHEDULABLE])
            remaining = failed
        if accepted is None:
            return no_cell()
        merged = {"items": [result for result in results if result is not None]}
        return _with_body(accepted, merged).response()

    async def _decisions(
        self, cell: Cell, vms: Sequence[dict[str, Any]], headers: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """``vms`` as their cell shows them once decided (no longer pending), or as last seen when
        ``VMSCHED_ROUTER_DECISION_WAIT`` runs out first."""
        deadline = time.monotonic() + self.settings.router_decision_wait
        latest = list(vms)
        limit = asyncio.Semaphore(CONCURRENT_LOOKS)

        async def look(vm: dict[str, Any]) -> dict[str, Any]:
            async with limit:
                try:
                    answer = await forward(cell, "GET", f"/v1/vms/{vm['id']}", headers, route="decision")
                except httpx.HTTPError:
                    return vm
            return dict(json.loads(answer.body)) if answer.status == status.HTTP_200_OK else vm

        pause = FIRST_LOOK
        while True:
            undecided = [index for index, vm in enumerate(latest) if vm["status"] == UNDECIDED]
            if not undecided or time.monotonic() >= deadline:
                return latest
            await asyncio.sleep(min(pause, max(deadline - time.monotonic(), 0)))
            pause = min(pause * 2, LONGEST_LOOK)
            seen = await asyncio.gather(*(look(latest[index]) for index in undecided))
            for index, vm in zip(undecided, seen, strict=True):
                latest[index] = vm

    async def _forget(self, cell: Cell, vm_ids: Sequence[str], headers: Mapping[str, str]) -> None:
        """Delete VMs a cell answered unschedulable for, now tried elsewhere: the caller never saw
        them. Best effort (an unschedulable VM holds nothing)."""
        for vm_id in vm_ids:
            try:
                await forward(cell, "DELETE", f"/v1/vms/{vm_id}", headers, route="forget")
            except httpx.HTTPError as error:
                log.warning("unschedulable VM left in its cell", cell=cell.name, vm_id=vm_id, error=repr(error))

    async def create_group(self, raw: bytes, headers: Mapping[str, str]) -> Response:
        """A server group lives in one cell, chosen as for a VM that asks nothing; its VMs follow it."""
        for name in least_loaded(self.table.summaries()):
            cell = self.table.cells[name]
            try:
                answer = await forward(cell, "POST", "/v1/server-groups", headers, body=raw, route="create_group")
            except httpx.HTTPError:
                continue
            if answer.status in (status.HTTP_200_OK, status.HTTP_201_CREATED):
                await self.store.record([f"group:{json.loads(answer.body)['id']}"], name)
            return answer.response()
        return no_cell()

    # -- one VM, host or group ----------------------------------------------------------------------

    async def locate(
        self, kind: str, item_id: str, probe: str, headers: Mapping[str, str]
    ) -> tuple[Cell | None, Answer | None]:
        """The cell holding ``kind:item_id``: by the route table, else the cell that answers 200 to
        ``GET probe`` (then recorded). Without one, a cell's refusal to show (401, 403, 404), if any."""
        known = await self.store.cell_of(f"{kind}:{item_id}")
        if known is not None and known in self.table.cells:
            return self.table.cells[known], None
        cells = list(self.table.cells.values())
        answers = await asyncio.gather(
            *(forward(cell, "GET", probe, headers, route="locate") for cell in cells), return_exceptions=True
        )
        refusals: list[Answer] = []
        for cell, answer in zip(cells, answers, strict=True):
            if isinstance(answer, Answer):
                if answer.status == status.HTTP_200_OK:
                    if kind != "host":  # host ids are a cell's own; the probe is as cheap as a lookup
                        await self.store.record([f"{kind}:{item_id}"], cell.name)
                    return cell, None
                refusals.append(answer)
        refusals.sort(key=lambda answer: answer.status == status.HTTP_404_NOT_FOUND)
        return None, refusals[0] if refusals else None

    async def by_id(
        self,
        kind: str,
        item_id: str,
        probe: str,
        method: str,
        path: str,
        raw: bytes,
        headers: Mapping[str, str],
        params: Mapping[str, str],
    ) -> Response:
        cell, refused = await self.locate(kind, item_id, probe, headers)
        if cell is None:
            if refused is not None:
                return refused.response()
            return refusal(status.HTTP_503_SERVICE_UNAVAILABLE, "no cell answered")
        try:
            answer = await forward(cell, method, path, headers, body=raw or None, params=params, route=kind)
        except httpx.HTTPError:
            return refusal(status.HTTP_503_SERVICE_UNAVAILABLE, f"cell {cell.name} did not answer")
        return answer.response()

    # -- lists over every cell ------------------------------------------------------------------------

    async def _ask_all(
        self, path: str, headers: Mapping[str, str], params: Mapping[str, Mapping[str, str]], route: str
    ) -> tuple[dict[str, Answer], list[str]]:
        """``GET path`` on every cell named in ``params`` (with its own query); the answers, and the
        cells that did not answer."""
        names = list(params)
        answers = await asyncio.gather(
            *(
                forward(self.table.cells[name], "GET", path, headers, params=params[name], route=route)
                for name in names
            ),
            return_exceptions=True,
        )
        got = {name: answer for name, answer in zip(names, answers, strict=True) if isinstance(answer, Answer)}
        return got, [name for name in names if name not in got]

    @staticmethod
    def _merged(answers: Mapping[str, Answer], missing: list[str], payload: Any) -> Response:
        for answer in answers.values():
            if answer.status != status.HTTP_200_OK:
                return answer.response()
        headers = {CELL_HEADER: ",".join(sorted(answers))}
        if missing:
            headers[MISSING_CELLS_HEADER] = ",".join(missing)
        if not answers:
            return refusal(status.HTTP_503_SERVICE_UNAVAILABLE, "no cell answered")
        return JSONResponse(payload(), headers=headers)

    async def list_all(self, path: str, headers: Mapping[str, str], params: Mapping[str, str]) -> Response:
        """A list that is one JSON array per cell (hosts, server groups): concatenated, cell by cell."""
        answers, missing = await self._ask_all(path, headers, dict.fromkeys(self.table.cells, params), "list")
        return self._merged(
            answers, missing, lambda: [item for name in sorted(answers) for item in json.loads(answers[name].body)]
        )

    async def list_vms(self, headers: Mapping[str, str], params: Mapping[str, str]) -> Response:
        """``GET /v1/vms`` over every cell: a page is one page of each cell not yet exhausted (so up to
        ``limit`` VMs per cell), the cursor carrying each cell's own position."""
        query = {name: value for name, value in params.items() if name != "cursor"}
        try:
            positions = decode_cursor(params.get("cursor"), list(self.table.cells))
        except ValueError as error:
            return JSONResponse(
                {"detail": [{"loc": ["query", "cursor"], "msg": str(error), "type": "value_error"}]},
                status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
            )
        asked = {
            name: {**query, **({"cursor": position} if position else {})}
            for name, position in positions.items()
            if position is not None
        }
        answers, missing = await self._ask_all("/v1/vms", headers, asked, "list_vms")
        pages = {name: json.loads(answer.body) for name, answer in answers.items() if answer.status == 200}
        # A cell that did not answer is asked again from the same position on the next page.
        following = {
            name: None if position is None else pages[name]["next_cursor"] if name in pages else position
            for name, position in positions.items()
        }
        done = all(position is None for position in following.values())

        def payload() -> dict[str, Any]:
            items = [item for name in sorted(pages) for item in pages[name]["items"]]
            items.sort(key=lambda item: (item.get("created_at") or "", item["id"]))
            return {"items": items, "next_cursor": None if done else encode_cursor(following)}

        return self._merged(answers, missing, payload)


def encode_cursor(positions: Mapping[str, str | None]) -> str:
    """Each cell's next cursor (None: that cell is done), as one opaque string."""
    return base64.urlsafe_b64encode(json.dumps(positions, sort_keys=True).encode()).decode()


def decode_cursor(cursor: str | None, cells: Sequence[str]) -> dict[str, str | None]:
    """The cells' positions a cursor carries: ``""`` to start a cell, None when it is done. Without a
    cursor, every cell starts; a cell added since the cursor was made starts too."""
    if not cursor:
        return dict.fromkeys(cells, "")
    try:
        positions = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not isinstance(positions, dict):
            raise TypeError
    except (ValueError, TypeError):
        raise ValueError("not a cursor of this router") from None
    return {name: positions.get(name, "") for name in cells}
