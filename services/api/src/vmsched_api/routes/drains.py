"""/v1/hosts/{id}/drain: empty a host for maintenance (CloudStack's maintenance mode, ``kubectl
drain``): pause it and move every VM away by live migration; watch where it stands; end it (the host
back in service). The gateway carries drains out (vmsched_gateway.migration_sweeps); the rules are
vmsched_domain.drain's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Response, status

from vmsched_api.deps import Services, ServicesDep
from vmsched_api.identity.auth import HostsAdmin, HostsReader
from vmsched_api.refusals import refusals
from vmsched_contract.api import Drain, DrainedVm, DrainRequest, StuckVm
from vmsched_domain.records import HostRecord
from vmsched_pg.drains import AlreadyDraining, DrainStore, StoredDrain, deadline_of
from vmsched_redis.host_hash import inventory_fields
from vmsched_runtime.logs import get_logger

router = APIRouter(prefix="/hosts", tags=["hosts"])
log = get_logger("vmsched_api")


def to_drain(stored: StoredDrain) -> Drain:
    progress = stored.progress
    return Drain(
        host_id=stored.drain.host_id,
        state=progress.state,
        evacuate=stored.drain.evacuate,
        max_parallel=stored.drain.max_parallel,
        deadline_at=deadline_of(stored),
        created_at=stored.created_at,
        ended_at=stored.ended_at,
        moved=[DrainedVm(vm_id=m.vm_id, to=m.to) for m in progress.moved],
        in_flight=progress.in_flight,
        stuck=[StuckVm(vm_id=s.vm_id, reason=s.reason) for s in progress.stuck],
        queued=progress.queued,
    )


async def _pause_in_snapshot(services: Services, host: HostRecord) -> None:
    # PostgreSQL changed first (a scheduler's commit checks the pause there), as PATCH /v1/hosts does.
    await services.snapshot.set_host_fields(
        host.id,
        inventory_fields(
            host.labels,
            host.taints,
            host.overcommit,
            host.reserved,
            host.scheduling_paused,
            dedicated_to=host.dedicated_to,
        ),
    )


@router.post(
    "/{host_id}/drain", status_code=status.HTTP_202_ACCEPTED, response_model=Drain, responses=refusals(404, 409)
)
async def start_drain(
    host_id: str, services: ServicesDep, _: HostsAdmin, body: Annotated[DrainRequest | None, Body()] = None
) -> Drain:
    """Pause the host (nothing new is placed on it) and, with ``evacuate``, migrate every VM away,
    at most ``max_parallel`` at once, each to a host every rule of the VM allows. A VM that cannot move
    is listed in ``stuck`` with the reason and tried again until ``deadline_s`` has passed; then the VMs
    left stay where they are, running. Nothing is ever stopped or deleted. The host's status is
    ``draining``, then ``drained`` once nothing is on it. 409: a drain of the host exists already."""
    asked = body or DrainRequest()
    try:
        started = await DrainStore(services.engine).start(
            host_id, evacuate=asked.evacuate, deadline_s=asked.deadline_s, max_parallel=asked.max_parallel
        )
    except AlreadyDraining as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    if started is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {host_id}")
    host, stored = started
    await _pause_in_snapshot(services, host)
    log.info("drain started", host=host_id, evacuate=asked.evacuate, max_parallel=asked.max_parallel)
    return to_drain(stored)


@router.get("/{host_id}/drain", response_model=Drain, responses=refusals(404))
async def get_drain(host_id: str, services: ServicesDep, _: HostsReader) -> Drain:
    """Where the host's drain stands: the VMs moved, in flight, stuck (with the reason), queued."""
    stored = await DrainStore(services.engine).get(host_id)
    if stored is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"host {host_id} has no drain")
    return to_drain(stored)


@router.delete("/{host_id}/drain", status_code=status.HTTP_204_NO_CONTENT, responses=refusals(404))
async def end_drain(host_id: str, services: ServicesDep, _: HostsAdmin) -> Response:
    """End the drain, finished or not, and unpause the host (``kubectl uncordon``): it takes VMs
    again. Migrations in flight finish on their own."""
    host = await DrainStore(services.engine).end(host_id)
    if host is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"host {host_id} has no drain")
    await _pause_in_snapshot(services, host)
    log.info("drain ended", host=host_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
