"""/v1/summary: this cell's capacity in a few numbers, for the cell router (docs/scaling.md, "Cells")."""

from __future__ import annotations

from fastapi import APIRouter

from vmsched_api.cell_summary import summarize
from vmsched_api.deps import ServicesDep
from vmsched_api.identity.auth import HostsReader
from vmsched_contract.cells import CellSummary

router = APIRouter(prefix="/summary", tags=["hosts"])


@router.get("", response_model=CellSummary)
async def get_summary(services: ServicesDep, _: HostsReader) -> CellSummary:
    """Free capacity per resource and per label set (hosts online and not paused, grouped by their
    labels), host counts and the number of waiting VMs: never per host. Read from PostgreSQL, the
    truth; a router reads it every few seconds."""
    hosts = await services.repository.list_hosts()
    return summarize(hosts, await services.repository.count_waiting())
