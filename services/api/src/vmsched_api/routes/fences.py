"""/v1/hosts/{id}/fence: an operator declares a host down now (Nova's ``forced_down``), or puts a
fenced host back in service (docs/operations.md#fencing). The gateway fails the fenced host's VMs
(their restart policy applies) within a second of the fence; the host takes no VM until unfenced."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from vmsched_amqp import events
from vmsched_api.deps import Services, ServicesDep
from vmsched_api.identity.auth import HostsAdmin
from vmsched_api.refusals import refusals
from vmsched_api.repository import to_host
from vmsched_contract.api import Host
from vmsched_contract.fencing import FencedBy, HostFenced
from vmsched_domain.records import HostRecord
from vmsched_pg.fences import FenceStore, NotFenced
from vmsched_runtime.logs import get_logger

router = APIRouter(prefix="/hosts", tags=["hosts"])
log = get_logger("vmsched_api")


async def _status_in_snapshot(services: Services, host: HostRecord) -> None:
    # PostgreSQL changed first: the schedulers' guard takes only online hosts there, so a placement
    # racing with this request cannot land on a fenced host even before the snapshot learns of it.
    try:
        await services.snapshot.set_host_fields(host.id, {"status": host.status})
    except Exception as error:
        log.warning("host status not written to the snapshot", host=host.id, error=repr(error))


@router.post("/{host_id}/fence", response_model=Host, responses=refusals(404))
async def fence_host(host_id: str, services: ServicesDep, _: HostsAdmin) -> Host:
    """Declare the host down now: its VMs are failed (by the gateway, within a second) and their
    restart policy applies; it takes no VM until ``DELETE /v1/hosts/{id}/fence``; if its agent comes
    back, it is told to delete every VM it still runs. Fencing a fenced host changes nothing."""
    fenced = await FenceStore(services.engine).fence(host_id, FencedBy.OPERATOR)
    if fenced is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    await _status_in_snapshot(services, fenced.host)
    if fenced.newly:
        log.warning("host fenced by an operator", host=host_id)
        await services.publisher.publish(events.HOST_FENCED, HostFenced(host_id=host_id, by=FencedBy.OPERATOR))
    return to_host(fenced.host)


@router.delete("/{host_id}/fence", response_model=Host, responses=refusals(404, 409))
async def unfence_host(host_id: str, services: ServicesDep, _: HostsAdmin) -> Host:
    """Put a fenced host back in service: it takes VMs again once its agent is heard from. 409: the
    host is not fenced."""
    try:
        host = await FenceStore(services.engine).unfence(host_id, offline_after=services.settings.agent_offline_timeout)
    except NotFenced as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    if host is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    await _status_in_snapshot(services, host)
    log.info("host unfenced", host=host_id)
    return to_host(host)
