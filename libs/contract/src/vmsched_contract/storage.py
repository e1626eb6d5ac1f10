"""Storage pools and volumes (issue 26, CloudStack's StoragePoolAllocator): the pools a host reaches,
as its heartbeat lists them; a VM's volumes, each placed on one pool; the operator's shared pools.

A ``local`` pool belongs to one host and its agent states its capacity; a ``shared`` pool (NFS, Ceph,
iSCSI) is reached by many hosts, its space counted once whichever host a VM lands on, and its
capacity and tags are the operator's (``PUT /v1/storage-pools/{name}``): a heartbeat only says the
host reaches it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

# A pool's name: as a host id (it is a key in Redis and in URLs).
PoolName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
PoolTag = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
MAX_POOL_TAGS = 16
PoolTags = Annotated[list[PoolTag], Field(max_length=MAX_POOL_TAGS)]
MAX_POOLS_PER_HOST = 32
MAX_VOLUMES = 16
MAX_POOL_GB = 1 << 40


class PoolKind(StrEnum):
    LOCAL = "local"
    SHARED = "shared"


class StoragePool(BaseModel):
    """A pool a host reaches, as its heartbeat lists it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: PoolName
    kind: PoolKind
    capacity_gb: Annotated[int, Field(ge=0, le=MAX_POOL_GB)] | None = Field(
        default=None, description="a local pool's size in GB (required); a shared pool's is the operator's"
    )
    tags: PoolTags = Field(default_factory=list, description="a local pool's tags; a shared pool's are the operator's")

    @model_validator(mode="after")
    def _local_has_capacity(self) -> StoragePool:
        if self.kind is PoolKind.LOCAL and self.capacity_gb is None:
            raise ValueError("a local pool needs capacity_gb")
        return self


HostPools = Annotated[list[StoragePool], Field(max_length=MAX_POOLS_PER_HOST)]


class Volume(BaseModel):
    """A volume a VM asks for: it goes to one pool its host reaches that carries every tag and has room."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size_gb: Annotated[int, Field(ge=1, le=MAX_POOL_GB, description="size in GB")]
    tags: PoolTags = Field(default_factory=list, description="tags the pool must carry (all of them)")


Volumes = Annotated[list[Volume], Field(max_length=MAX_VOLUMES)]


class PlacedVolume(Volume):
    """A volume and the pool it was placed on (null until the VM is placed)."""

    pool: PoolName | None = None
    shared: bool | None = Field(
        default=None, description="whether its pool is shared: a migration keeps it there (null until placed)"
    )


class SharedPoolBody(BaseModel):
    """``PUT /v1/storage-pools/{name}``: a shared pool's capacity and tags."""

    model_config = ConfigDict(extra="forbid")

    capacity_gb: Annotated[int, Field(ge=0, le=MAX_POOL_GB)]
    tags: PoolTags = Field(default_factory=list)


class PoolSpace(BaseModel):
    """A shared pool's space as the capacity snapshot holds it (``GET /v1/capacity``)."""

    name: PoolName
    capacity_gb: int
    allocated_gb: int
    free_gb: int


class SharedPoolView(BaseModel):
    """A shared pool as ``GET /v1/storage-pools`` shows it."""

    name: PoolName
    capacity_gb: int
    tags: list[str]
    allocated_gb: int = Field(description="the volumes placed on it of VMs that hold capacity")
    vms: int = Field(description="the VMs those volumes belong to")
    hosts: int = Field(description="hosts whose heartbeat says they reach it")
    updated_at: datetime
