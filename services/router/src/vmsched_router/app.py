"""The router process: FastAPI routes forwarding /v1 requests to the cells (``routing``), the cell
table's refresher, /healthz, /readyz and /metrics.

The router authenticates nobody itself: every /v1 request goes to a cell with the caller's token,
and the cell answers 401 or 403 as it would if asked directly (docs/security.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response, status
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from vmsched_router.cells import CellTable
from vmsched_router.routing import Router
from vmsched_router.store import RouteStore
from vmsched_runtime.logs import get_logger
from vmsched_runtime.settings import Settings
from vmsched_runtime.telemetry import instrument_fastapi

log = get_logger("vmsched_router")

DESCRIPTION = """The vmsched cell router: one API in front of several vmsched cells (docs/scaling.md).

`POST /v1/vms` and `/v1/vms/batch` go to a cell chosen by labels, room and load; requests about one
VM go to the cell that holds it; `GET /v1/vms`, `/v1/hosts` and `/v1/server-groups` merge every
cell's answer. Each request is forwarded with the caller's `Authorization` header: the cell
authenticates it. Bodies and answers are the cells' own (see a cell's `/docs`); the answering cell
is named in the `X-Vmsched-Cell` header.
"""


def router_of(request: Request) -> Router:
    routing: Router = request.app.state.router
    return routing


RouterDep = Annotated[Router, Depends(router_of)]


def v1_routes() -> APIRouter:
    v1 = APIRouter(prefix="/v1")

    @v1.post("/vms", status_code=status.HTTP_202_ACCEPTED)
    async def create_vm(request: Request, routing: RouterDep) -> Response:
        """Create a VM in the cell chosen for it (the cell's body and answer)."""
        return await routing.create_vm(await request.body(), request.headers)

    @v1.post("/vms/batch", status_code=status.HTTP_202_ACCEPTED)
    async def create_vms(request: Request, routing: RouterDep) -> Response:
        """Create a batch in one cell; VMs a cell answers unschedulable for are tried on the next."""
        return await routing.create_batch(await request.body(), request.headers)

    @v1.get("/vms")
    async def list_vms(request: Request, routing: RouterDep) -> Response:
        """Every cell's VMs: a page of each cell per page; the cursor carries each cell's position."""
        return await routing.list_vms(request.headers, dict(request.query_params))

    @v1.api_route("/vms/{vm_id}", methods=["GET", "DELETE"])
    @v1.api_route("/vms/{vm_id}/{action:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def one_vm(vm_id: str, request: Request, routing: RouterDep) -> Response:
        """Anything about one VM: forwarded to the cell that holds it."""
        return await routing.by_id(
            "vm",
            vm_id,
            f"/v1/vms/{vm_id}",
            request.method,
            request.url.path,
            await request.body(),
            request.headers,
            dict(request.query_params),
        )

    @v1.get("/hosts")
    async def list_hosts(request: Request, routing: RouterDep) -> Response:
        """Every cell's hosts, cell by cell."""
        return await routing.list_all("/v1/hosts", request.headers, dict(request.query_params))

    @v1.api_route("/hosts/{host_id}", methods=["GET", "PATCH", "DELETE"])
    @v1.api_route("/hosts/{host_id}/{action:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def one_host(host_id: str, request: Request, routing: RouterDep) -> Response:
        """Anything about one host: forwarded to the cell that knows it."""
        return await routing.by_id(
            "host",
            host_id,
            f"/v1/hosts/{host_id}",
            request.method,
            request.url.path,
            await request.body(),
            request.headers,
            dict(request.query_params),
        )

    @v1.post("/server-groups", status_code=status.HTTP_201_CREATED)
    async def create_group(request: Request, routing: RouterDep) -> Response:
        """Create a server group in the least-loaded cell; its members will be placed there."""
        return await routing.create_group(await request.body(), request.headers)

    @v1.get("/server-groups")
    async def list_groups(request: Request, routing: RouterDep) -> Response:
        return await routing.list_all("/v1/server-groups", request.headers, dict(request.query_params))

    @v1.api_route("/server-groups/{group_id}", methods=["GET", "DELETE"])
    async def one_group(group_id: str, request: Request, routing: RouterDep) -> Response:
        return await routing.by_id(
            "group",
            group_id,
            f"/v1/server-groups/{group_id}",
            request.method,
            request.url.path,
            await request.body(),
            request.headers,
            dict(request.query_params),
        )

    return v1


def system_routes() -> APIRouter:
    system = APIRouter(tags=["system"])

    @system.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @system.get("/readyz")
    async def readyz(routing: RouterDep, response: Response) -> dict[str, Any]:
        """Ready when the route store answers and at least one cell does; each cell's state named
        (a cell down is skipped for new VMs, and shown here, without making the router unready)."""
        try:
            store = "ok" if await asyncio.wait_for(routing.store.ping(), timeout=2.0) else "unreachable"
        except Exception as error:
            store = f"unreachable: {type(error).__name__}"
        cells = {
            name: {
                "state": "ok",
                "load": round(cell.summary.load(), 4),
                "waiting": cell.summary.waiting,
                "schedulable_hosts": cell.summary.schedulable_hosts,
            }
            if cell.summary is not None
            else {"state": cell.problem or "unreachable"}
            for name, cell in routing.table.cells.items()
        }
        if store != "ok" or not routing.table.up():
            response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        return {"store": store, "cells": cells}

    @system.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return system


def build_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = await RouteStore.open(str(settings.router_database_url))
        table = CellTable.of(settings.router_cells, settings.router_cell_timeout)
        await table.refresh()  # the first summaries before the first request
        app.state.router = Router(settings, table, store)
        refresher = asyncio.create_task(table.refresh_forever(settings.router_refresh_interval))
        log.info("router ready", cells=len(table.cells), up=len(table.up()))
        try:
            yield
        finally:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
            await table.close()
            await store.close()

    application = FastAPI(title="vmsched cell router", description=DESCRIPTION, lifespan=lifespan, redoc_url=None)
    application.include_router(v1_routes())
    application.include_router(system_routes())
    instrument_fastapi(application)
    return application
