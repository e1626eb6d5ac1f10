"""/v1/hosts: the fleet as PostgreSQL records it (with each host's measured usage from the capacity
snapshot); what the operator owns of a host (pause, labels, taints, ratios, reserved); deleting one."""

from __future__ import annotations

import dataclasses
import time

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from vmsched_api.agent_queues import delete_agent_queue
from vmsched_api.deps import Services, ServicesDep
from vmsched_api.identity.auth import HostsAdmin, HostsReader
from vmsched_api.refusals import refusals
from vmsched_api.repository import HostRemoval, to_host
from vmsched_api.scheduling_info import render_scheduling_info, scheduling_info
from vmsched_contract.api import Host, HostPatch
from vmsched_domain.usage import MeasuredUsage
from vmsched_pg.drains import DrainStore
from vmsched_redis.host_hash import inventory_fields
from vmsched_runtime.logs import get_logger

router = APIRouter(prefix="/hosts", tags=["hosts"])
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
async def list_hosts(services: ServicesDep, _: HostsReader) -> list[Host]:
    hosts = await services.repository.list_hosts()
    usage = await _usage(services, [host.id for host in hosts])
    drains = await DrainStore(services.engine).states()
    return [to_host(host, usage.get(host.id), drains.get(host.id)) for host in hosts]


@router.get("/{host_id}", response_model=Host, responses=refusals(404))
async def get_host(host_id: str, services: ServicesDep, _: HostsReader) -> Host:
    host = await services.repository.get_host(host_id)
    if host is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    drains = await DrainStore(services.engine).states()
    return to_host(host, (await _usage(services, [host_id])).get(host_id), drains.get(host_id))


@router.patch("/{host_id}", response_model=Host, responses=refusals(404))
async def patch_host(host_id: str, body: HostPatch, services: ServicesDep, _: HostsAdmin) -> Host:
    """Change what the operator owns of a host: pause it, its labels, taints, allocation ratios and
    reserved capacity. Fields left out stay as they are. Capacity may be lowered below what is
    allocated: the host keeps its VMs and takes nothing new until it has room again."""
    host = await services.repository.patch_host(host_id, body)
    if host is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    # PostgreSQL changed first: the scheduler's commit checks the fit rule and the pause flag there,
    # so a placement racing with this request cannot break them even before the snapshot learns of it.
    await services.snapshot.set_host_fields(
        host_id,
        inventory_fields(
            host.labels,
            host.taints,
            host.overcommit,
            host.reserved,
            host.scheduling_paused,
            dedicated_to=host.dedicated_to,
        ),
    )
    return to_host(host, (await _usage(services, [host_id])).get(host_id))


@router.delete(
    "/{host_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=refusals(404, 409),
)
async def delete_host(host_id: str, services: ServicesDep, _: HostsAdmin) -> Response:
    """Forget a host no VM occupies: its row, its agent queue and its snapshot entry. A later
    heartbeat from it registers it again, as a new host."""
    removal, occupants = await services.repository.delete_host(host_id)
    if removal is HostRemoval.UNKNOWN:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    if removal is HostRemoval.OCCUPIED:
        shown = ", ".join(str(vm_id) for vm_id in occupants)
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"host {host_id} has VMs or reservation slots on it (delete or move them, end the reservations): {shown}",
        )
    # PostgreSQL decided; the rest follows. A step that fails is logged: a leftover queue holds no
    # command of a VM, and a leftover snapshot entry is refused by PostgreSQL's guard.
    try:
        await services.snapshot.forget_host(host_id)
    except Exception as error:
        log.error("deleted host left in the snapshot", host=host_id, error=repr(error))
    try:
        await delete_agent_queue(services.broker, host_id)
    except Exception as error:
        log.error("deleted host's agent queue left behind", host=host_id, error=repr(error))
    log.info("host deleted", host=host_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{host_id}/scheduling-info",
    responses={200: {"content": {"text/plain": {}, "application/json": {}}}, **refusals(404)},
)
async def get_scheduling_info(host_id: str, services: ServicesDep, request: Request, _: HostsReader) -> Response:
    """The host as the scheduler weighs it: text (the seed's getSchedulingInfo block) or JSON with
    ``Accept: application/json``."""
    host = await services.repository.get_host(host_id)
    if host is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    running = await services.repository.count_running_on(host_id)
    info = scheduling_info(host, time.time(), services.settings.agent_offline_timeout, running)
    if "application/json" in request.headers.get("accept", ""):
        return JSONResponse(dataclasses.asdict(info))
    return PlainTextResponse(render_scheduling_info(info) + "\n")
