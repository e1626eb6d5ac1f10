"""/v1/hosts: the fleet as PostgreSQL records it (with each host's measured usage from the capacity
snapshot); pausing a host for maintenance."""

from __future__ import annotations

import dataclasses
import time

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from vmsched_api.deps import Services, ServicesDep
from vmsched_api.repository import to_host
from vmsched_api.schemas import Host, HostPatch
from vmsched_common.logs import get_logger
from vmsched_common.scheduling_info import render_scheduling_info, scheduling_info
from vmsched_common.snapshot import MeasuredUsage

router = APIRouter(prefix="/v1/hosts", tags=["hosts"])
log = get_logger("vmsched_api")


async def _usage(services: Services, host_ids: list[str]) -> dict[str, MeasuredUsage | None]:
    """Measured usage lives only in the snapshot (it changes every heartbeat; PostgreSQL does not
    keep it). Without Redis the hosts are still served, without usage."""
    if not host_ids:
        return {}
    try:
        return await services.snapshot.read_usage(host_ids)
    except Exception as error:
        log.warning("measured usage not read", error=repr(error))
        return {}


@router.get("", response_model=list[Host])
async def list_hosts(services: ServicesDep) -> list[Host]:
    hosts = await services.repository.list_hosts()
    usage = await _usage(services, [host.id for host in hosts])
    return [to_host(host, usage.get(host.id)) for host in hosts]


@router.get("/{host_id}", response_model=Host)
async def get_host(host_id: str, services: ServicesDep) -> Host:
    host = await services.repository.get_host(host_id)
    if host is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    return to_host(host, (await _usage(services, [host_id])).get(host_id))


@router.patch("/{host_id}", response_model=Host)
async def patch_host(host_id: str, body: HostPatch, services: ServicesDep) -> Host:
    """Pause or resume scheduling on a host (maintenance). Its VMs stay where they are."""
    host = await services.repository.set_paused(host_id, body.scheduling_paused)
    if host is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    # PostgreSQL changed first: the scheduler's commit re-checks the flag there, so a placement racing
    # with this request cannot land on the paused host even before the snapshot learns of it.
    await services.snapshot.set_host_fields(host_id, {"paused": "1" if body.scheduling_paused else "0"})
    return to_host(host, (await _usage(services, [host_id])).get(host_id))


@router.get(
    "/{host_id}/scheduling-info",
    responses={200: {"content": {"text/plain": {}, "application/json": {}}}},
)
async def get_scheduling_info(host_id: str, services: ServicesDep, request: Request) -> Response:
    """The host as the scheduler weighs it: text (the seed's getSchedulingInfo block) or JSON with
    ``Accept: application/json``."""
    host = await services.repository.get_host(host_id)
    if host is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    info = scheduling_info(host, time.time(), services.settings.agent_offline_timeout)
    if "application/json" in request.headers.get("accept", ""):
        return JSONResponse(dataclasses.asdict(info))
    return PlainTextResponse(render_scheduling_info(info) + "\n")
