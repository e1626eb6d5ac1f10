"""The what-if routes' bodies (docs/whatif.md): ``POST /v1/placement/simulate`` and ``GET /v1/capacity``."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from vmsched_contract.api import VmRequest
from vmsched_contract.decision import RejectedHost
from vmsched_contract.messages import HostId
from vmsched_contract.storage import PoolSpace
from vmsched_contract.strategy import Strategy

MAX_SIMULATED_VMS = 1000


class SimulationRequest(BaseModel):
    """VMs to place in imagination, in order, on the fleet as it is now (less ``without_hosts``)."""

    model_config = ConfigDict(extra="forbid")

    vms: Annotated[list[VmRequest], Field(min_length=1, max_length=MAX_SIMULATED_VMS)]
    without_hosts: Annotated[list[HostId], Field(max_length=100_000)] = Field(
        default_factory=list, description="leave these hosts out, as if they were gone (a decommission, a failure)"
    )
    strategy: Strategy | None = Field(
        default=None, description="in place of the cluster's default strategy (a VM's own strategy still wins)"
    )
    seed: int | None = Field(
        default=None, description="seed of the randomness strategy 'random' draws from (omitted: a fresh one)"
    )


class SimulatedVm(BaseModel):
    """Where one VM would land, or why it would not, in the words of a decision record."""

    index: int = Field(description="its position in the request's vms")
    name: str
    strategy: Strategy
    host: str | None = Field(description="the host it would land on; null when no host would take it")
    score: float | None = Field(description="the chosen host's score (lower is better); null for unscored strategies")
    reason: str | None = Field(
        description="when it would not fit: no_available_agents, or the rule that stopped the hosts that came closest"
    )
    detail: str | None
    considered: int = Field(description="hosts in the fleet")
    eligible: int = Field(description="hosts that passed every filter")
    rejections: dict[str, int] = Field(description="rule -> hosts that rule rejected first")
    volumes: list[str] = Field(
        default_factory=list, description="the storage pool each of its volumes would go to, on that host"
    )
    examples: dict[str, list[RejectedHost]] = Field(description="when it would not fit: a few hosts per rule, why")
    cluster: str | None = Field(
        default=None, description="planner cluster_first: the cluster whose hosts the strategy ranked"
    )


class Simulation(BaseModel):
    placements: list[SimulatedVm]
    placed: int
    unplaced: int
    without_hosts: list[str]


class HostCapacity(BaseModel):
    host: str
    zone: str | None = Field(description="the host's 'zone' label")
    fits: int = Field(description="more VMs of the shape it takes")
    refused_by: str | None = Field(description="when it takes none: the first rule that refuses it")


class ZoneCapacity(BaseModel):
    zone: str | None = Field(description="null: the hosts without a 'zone' label")
    fits: int
    hosts: int = Field(description="hosts of the zone that take at least one")


class Shape(BaseModel):
    cpu: int
    memory_mb: int
    disk_gb: int
    gpu: int
    networks: list[str] = Field(default_factory=list, description="the networks each VM needs on its host")


class ZoneFailover(BaseModel):
    zone: str | None = Field(description="null: the hosts without a 'zone' label")
    headroom: Shape = Field(
        description="what may still be placed in the zone while it keeps room to restart the VMs of its "
        "hosts_lost largest hosts on the others (negative: it could not restart them now)"
    )
    fits: int = Field(description="VMs of the shape the headroom takes")


class Failover(BaseModel):
    """HA capacity (docs/operations.md#ha-capacity): room kept per zone to restart the VMs of its
    largest hosts (those with restart_policy never count nothing)."""

    reserve_hosts: int = Field(description="VMSCHED_HA_RESERVE_HOSTS: placements keep this room (0: none kept)")
    hosts_lost: int = Field(description="the hosts whose loss the headroom is computed for (reserve_hosts, at least 1)")
    zones: list[ZoneFailover]


class Capacity(BaseModel):
    shape: Shape
    total: int = Field(description="more VMs of the shape the fleet takes (the HA reserve not counted: see failover)")
    zones: list[ZoneCapacity]
    hosts: list[HostCapacity]
    failover: Failover | None = Field(default=None, description="the failover headroom per zone")
    storage_pools: list[PoolSpace] = Field(
        default_factory=list, description="the shared storage pools and their free space (volumes are not in the shape)"
    )
