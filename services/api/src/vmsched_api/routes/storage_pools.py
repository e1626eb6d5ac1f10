"""/v1/storage-pools: the shared storage pools, whose capacity and tags are the operator's (a host's
heartbeat only says it reaches one); docs/operations.md#storage-pools."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Path, status
from fastapi.responses import Response

from vmsched_api.deps import ServicesDep
from vmsched_api.identity.auth import HostsAdmin, HostsReader
from vmsched_api.refusals import refusals
from vmsched_api.storage_pool_store import StoragePoolStore
from vmsched_contract.storage import SharedPoolBody, SharedPoolView
from vmsched_redis.storage_pools import forget_shared_pool, put_shared_pool
from vmsched_runtime.logs import get_logger

router = APIRouter(prefix="/storage-pools", tags=["storage-pools"])
log = get_logger("vmsched_api")

PoolPath = Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@router.get("", response_model=list[SharedPoolView])
async def list_pools(services: ServicesDep, _: HostsReader) -> list[SharedPoolView]:
    """Every shared pool with what is allocated on it and how many hosts reach it."""
    return await StoragePoolStore(services.engine).list()


@router.get("/{name}", response_model=SharedPoolView, responses=refusals(404))
async def get_pool(services: ServicesDep, _: HostsReader, name: str = PoolPath) -> SharedPoolView:
    pool = await StoragePoolStore(services.engine).get(name)
    if pool is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no storage pool {name}")
    return pool


@router.put("/{name}", response_model=SharedPoolView)
async def put_pool(body: SharedPoolBody, services: ServicesDep, _: HostsAdmin, name: str = PoolPath) -> SharedPoolView:
    """Create a shared pool or set its capacity and tags. PostgreSQL first (its guard checks every
    placement against it), then the snapshot the schedulers decide on."""
    pool = await StoragePoolStore(services.engine).put(name, body)
    await put_shared_pool(services.snapshot.redis, services.snapshot.prefix, name, pool.capacity_gb, pool.tags)
    log.info("storage pool set", pool=name, capacity_gb=pool.capacity_gb, tags=pool.tags)
    return pool


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, responses=refusals(404, 409))
async def delete_pool(services: ServicesDep, _: HostsAdmin, name: str = PoolPath) -> Response:
    """Forget a shared pool no VM's volumes are on (409 otherwise, naming up to 20 of them)."""
    known, users = await StoragePoolStore(services.engine).delete(name)
    if not known:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no storage pool {name}")
    if users:
        shown = ", ".join(str(vm_id) for vm_id in users)
        raise HTTPException(status.HTTP_409_CONFLICT, f"storage pool {name} holds volumes of VMs: {shown}")
    await forget_shared_pool(services.snapshot.redis, services.snapshot.prefix, name)
    log.info("storage pool deleted", pool=name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
