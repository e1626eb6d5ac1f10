"""/v1/reservations: capacity held for a project (vmsched_domain.reservations).

Made and ended by an admin (for any project); seen by the project's own tokens too (``vms:read``):
another project's reservation is a 404, as its VMs are.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, HTTPException, Query, Response, status

from vmsched_api.deps import ServicesDep
from vmsched_api.identity.auth import Admin, VmsReader
from vmsched_api.refusals import QUOTA_REFUSAL, refusals
from vmsched_api.reservation_store import ReservationStore, UnknownProject
from vmsched_contract.api import Reservation, ReservationRequest
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.messages import ProjectName, Resources
from vmsched_domain.records import ReservationRecord
from vmsched_runtime.logs import get_logger

router = APIRouter(prefix="/reservations", tags=["reservations"])
log = get_logger(__name__)


async def _store(services: ServicesDep) -> ReservationStore:
    return ReservationStore(services.engine)


StoreDep = Annotated[ReservationStore, Depends(_store)]


def _view(record: ReservationRecord) -> Reservation:
    return Reservation(
        id=record.id,
        project=record.project,
        status=record.status,
        status_reason=record.status_reason,
        cpu=record.resources.cpu,
        memory_mb=record.resources.memory_mb,
        disk_gb=record.resources.disk_gb,
        gpu=record.resources.gpu,
        count=record.count,
        used=record.used,
        held=record.held,
        lost=record.lost,
        hosts=list(record.hosts),
        host_selector=list(record.host_selector),
        ends_at=record.ends_at,
        created_at=record.created_at,
        updated_at=record.updated_at,
        placement=PlacementRecord.model_validate(record.placement) if record.placement else None,
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Reservation, responses=QUOTA_REFUSAL)
async def create_reservation(body: ReservationRequest, store: StoreDep, response: Response, _: Admin) -> Reservation:
    """Hold room for ``count`` VMs of one size for a project (counted against its quota from now on).
    It is ``pending`` until a scheduler places it, then ``held``, or ``unschedulable`` with reasons."""
    try:
        created = await store.create(
            project=body.project,
            resources=Resources(cpu=body.cpu, memory_mb=body.memory_mb, disk_gb=body.disk_gb, gpu=body.gpu),
            count=body.count,
            host_selector=body.host_selector,
            ends_at=body.ends_at,
        )
    except UnknownProject:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["body", "project"], "msg": f"no project {body.project}", "type": "unknown_project"}],
        ) from None
    response.headers["Location"] = f"/v1/reservations/{created.id}"
    return _view(created)


@router.get("", response_model=list[Reservation])
async def list_reservations(
    store: StoreDep,
    principal: VmsReader,
    project: Annotated[ProjectName | None, Query(description="admin only: one project's")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Reservation]:
    """Newest first: the token's project's (an admin's: every project's, or ``project``'s)."""
    return [_view(record) for record in await store.newest(principal.project_filter(project), limit)]


@router.get("/{reservation_id}", response_model=Reservation, responses=refusals(404))
async def get_reservation(reservation_id: UUID, store: StoreDep, principal: VmsReader) -> Reservation:
    found = await store.get(reservation_id, principal.project_filter(None))
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no reservation {reservation_id}")
    return _view(found)


@router.delete("/{reservation_id}", response_model=Reservation, responses=refusals(404))
async def delete_reservation(reservation_id: UUID, store: StoreDep, services: ServicesDep, _: Admin) -> Reservation:
    """End it now (``released``): the room still held goes back to the hosts; VMs already on its
    slots keep theirs. Ending an ended reservation changes nothing."""
    ended = await store.release(reservation_id)
    if ended is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no reservation {reservation_id}")
    record, slots = ended
    try:
        await services.snapshot.release_many(slots)
    except Exception as error:  # PostgreSQL is the truth: the reconcile drops the claims
        log.warning("released slots' claims stay in Redis until the reconcile", error=repr(error))
    return _view(record)
