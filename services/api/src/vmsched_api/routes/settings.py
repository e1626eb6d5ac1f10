"""/v1/settings: the cluster's runtime scheduler settings."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from vmsched_api.deps import ServicesDep
from vmsched_api.identity.auth import Admin, HostsReader
from vmsched_contract.api import SchedulerSettings, SchedulerSettingsView

router = APIRouter(prefix="/settings", tags=["settings"])


@router.get("/scheduler", response_model=SchedulerSettingsView)
async def get_scheduler_settings(services: ServicesDep, _: HostsReader) -> SchedulerSettingsView:
    runtime = await services.repository.default_strategy()
    if runtime is not None:
        return SchedulerSettingsView(default_strategy=runtime, source="runtime")
    return SchedulerSettingsView(default_strategy=services.settings.scheduling_strategy, source="environment")


@router.put("/scheduler", response_model=SchedulerSettingsView)
async def put_scheduler_settings(body: SchedulerSettings, services: ServicesDep, _: Admin) -> SchedulerSettingsView:
    """Change the cluster's default strategy; schedulers pick it up within seconds."""
    if body.default_strategy is None:  # pragma: no cover - pydantic already refuses it
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "default_strategy is required")
    await services.repository.set_default_strategy(body.default_strategy)
    return SchedulerSettingsView(default_strategy=body.default_strategy, source="runtime")
