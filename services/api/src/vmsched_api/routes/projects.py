"""/v1/projects: projects own VMs and tokens; each has a quota and uses some of it."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status

from vmsched_api.deps import Services, ServicesDep
from vmsched_api.identity.auth import Admin, VmsReader
from vmsched_api.project_store import ProjectExists, ProjectRecord
from vmsched_api.refusals import refusals
from vmsched_contract.api import Project, ProjectRequest, ProjectUsage, Quota
from vmsched_contract.messages import ProjectName

router = APIRouter(prefix="/projects", tags=["projects"])


async def _view(services: Services, record: ProjectRecord) -> Project:
    usage = await services.projects.usage(record.name)
    return Project(
        name=record.name,
        quota=Quota(**record.quota),
        usage=ProjectUsage(**usage),
        created_at=record.created_at,
    )


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Project, responses=refusals(409))
async def create_project(body: ProjectRequest, services: ServicesDep, response: Response, _: Admin) -> Project:
    try:
        record = await services.projects.create(body.name, body.quota.model_dump())
    except ProjectExists:
        raise HTTPException(status.HTTP_409_CONFLICT, f"project {body.name} exists") from None
    response.headers["Location"] = f"/v1/projects/{record.name}"
    return await _view(services, record)


@router.get("", response_model=list[Project])
async def list_projects(services: ServicesDep, _: Admin) -> list[Project]:
    return [await _view(services, record) for record in await services.projects.list()]


@router.get("/{name}", response_model=Project, responses=refusals(404))
async def get_project(name: ProjectName, services: ServicesDep, principal: VmsReader) -> Project:
    """A project's quota and usage: an admin's token sees every project, another only its own."""
    record = await services.projects.get(name) if principal.sees(name) else None
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no project {name}")
    return await _view(services, record)
