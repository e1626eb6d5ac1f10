"""What-if routes (docs/whatif.md): POST /v1/placement/simulate and GET /v1/capacity. Both read the
live state and change nothing (a POST only because a list of VMs is a body; the audit trail skips it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from vmsched_api.deps import ServicesDep
from vmsched_api.identity.auth import HostsReader, VmsReader
from vmsched_api.refusals import refusals
from vmsched_api.whatif import SnapshotUnavailable, UnknownHosts, fleet_capacity, simulate_placements
from vmsched_contract.networks import NetworkName
from vmsched_contract.whatif import Capacity, Shape, Simulation, SimulationRequest

router = APIRouter(tags=["what-if"], responses=refusals(503))


@router.post("/placement/simulate", response_model=Simulation)
async def simulate(body: SimulationRequest, services: ServicesDep, principal: VmsReader) -> Simulation:
    """Where each VM would land, in order (each sees the ones before it placed), and why those that
    would not fit would not; nothing is claimed, published or written (Nomad's ``job plan``)."""
    grouped = [index for index, vm in enumerate(body.vms) if vm.server_group is not None]
    if grouped:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [
                {
                    "loc": ["body", "vms", index, "server_group"],
                    "msg": "server groups are not simulated",
                    "type": "value_error",
                }
                for index in grouped
            ],
        )
    try:
        return await simulate_placements(services, body, principal.project)
    except UnknownHosts as error:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            [{"loc": ["body", "without_hosts"], "msg": str(error), "type": "unknown_host"}],
        ) from None
    except SnapshotUnavailable as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(error)) from None


@router.get("/capacity", response_model=Capacity)
async def get_capacity(
    services: ServicesDep,
    _: HostsReader,
    cpu: Annotated[int | None, Query(ge=1, le=1024, description="vCPUs; omitted: VMSCHED_DEFAULT_VM_CPU")] = None,
    memory_mb: Annotated[
        int | None, Query(ge=1, le=64 * 1024 * 1024, description="MiB; omitted: VMSCHED_DEFAULT_VM_MEMORY_MB")
    ] = None,
    disk_gb: Annotated[int, Query(ge=0, le=1024 * 1024)] = 0,
    gpu: Annotated[int, Query(ge=0, le=64)] = 0,
    network: Annotated[
        list[NetworkName],
        Query(description="a network each VM needs (repeat for several)"),
    ] = [],  # noqa: B006  # FastAPI copies a query list's default per request
) -> Capacity:
    """How many more VMs of this shape (no labels, selector or tolerations; the networks given) the
    fleet takes now: in total, per zone (the hosts' ``zone`` label) and per host."""
    settings = services.settings
    shape = Shape(
        cpu=settings.default_vm_cpu if cpu is None else cpu,
        memory_mb=settings.default_vm_memory_mb if memory_mb is None else memory_mb,
        disk_gb=disk_gb,
        gpu=gpu,
        networks=sorted(set(network)),
    )
    try:
        return await fleet_capacity(services, shape)
    except SnapshotUnavailable as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(error)) from None
