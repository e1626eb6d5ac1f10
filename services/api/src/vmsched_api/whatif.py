"""What-if on live state (docs/whatif.md): where VMs would land, how many more of a shape fit.

Read-only by construction: the capacity snapshot is read as a scheduler reads it (every host, then the
round-robin cursor without taking it), the fleet built from it is this request's own copy, and the
decisions are the placement engine's (``vmsched_placement``), the one the schedulers run. Nothing is
claimed, published or written, in Redis or PostgreSQL.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from uuid import UUID

from redis.exceptions import RedisError

from vmsched_api.deps import Services
from vmsched_contract.api import VmDefaults, VmRequest
from vmsched_contract.decision import RejectedHost
from vmsched_contract.messages import VmToPlace
from vmsched_contract.storage import PlacedVolume, PoolSpace
from vmsched_contract.strategy import Strategy
from vmsched_contract.whatif import (
    Capacity,
    Failover,
    HostCapacity,
    Shape,
    SimulatedVm,
    Simulation,
    SimulationRequest,
    ZoneCapacity,
    ZoneFailover,
)
from vmsched_domain.ha_reserve import headroom
from vmsched_pg.failover import read_reserve_hosts
from vmsched_pg.project_pods import project_pods
from vmsched_placement import DecisionContext, Demand, Fleet, PlacementRequest, Weights
from vmsched_placement.inputs import placement_request
from vmsched_placement.whatif import capacity, simulate, unplaced_detail
from vmsched_redis.engine_inputs import to_host_state


class UnknownHosts(Exception):
    """``without_hosts`` named hosts the capacity snapshot does not know."""

    def __init__(self, host_ids: list[str]) -> None:
        super().__init__(f"no host {', '.join(host_ids)} in the capacity snapshot")
        self.host_ids = host_ids


class SnapshotUnavailable(Exception):
    """Redis did not answer: there is no live state to ask about."""


async def live_fleet(services: Services) -> Fleet:
    try:
        _, records = await services.snapshot.read_all()
    except (RedisError, OSError) as error:
        raise SnapshotUnavailable(f"the capacity snapshot cannot be read: {error}") from error
    fleet = Fleet.from_hosts(to_host_state(record) for record in records.values())
    fleet.set_shared_pools(await services.snapshot.shared_pools())
    return fleet


def decision_context(services: Services, *, cursor: int = 0, seed: int | None = None) -> DecisionContext:
    settings = services.settings
    return DecisionContext(
        now=time.time(),
        offline_timeout=settings.agent_offline_timeout,
        weights=Weights(cpu=settings.weight_cpu, memory=settings.weight_memory, disk=settings.weight_disk),
        rng=random.Random(seed),
        round_robin_cursor=cursor,
    )


async def default_strategy(services: Services) -> Strategy:
    """The cluster's default strategy as the schedulers see it: the runtime setting, else the environment's."""
    return await services.repository.default_strategy() or services.settings.scheduling_strategy


def _request(index: int, vm: VmRequest, strategy: Strategy, defaults: VmDefaults, project: str) -> PlacementRequest:
    """What a scheduler would be asked for ``vm``: the VM as its vm.create would carry it, through the
    scheduler's own mapping."""
    to_place = VmToPlace(
        vm_id=UUID(int=index),
        name=vm.name,
        resources=vm.resources(defaults),
        labels=vm.labels,
        host_selector=vm.host_selector,
        tolerations=vm.tolerations,
        networks=vm.networks,
        dedicated=vm.dedicated,
        planner=vm.planner or defaults.planner,
        strategy=vm.strategy,
        project=project,
        volumes=[PlacedVolume(size_gb=volume.size_gb, tags=volume.tags) for volume in vm.volumes],
    )
    return placement_request(to_place, vm.strategy or strategy)


async def simulate_placements(services: Services, body: SimulationRequest, project: str) -> Simulation:
    """Each VM of ``body`` (of ``project``) decided in order on a copy of the live fleet, each booked
    before the next."""
    fleet = await live_fleet(services)
    unknown = sorted({host_id for host_id in body.without_hosts if host_id not in fleet})
    if unknown:
        raise UnknownHosts(unknown)
    for host_id in body.without_hosts:
        fleet.remove(host_id)
    strategy = body.strategy or await default_strategy(services)
    defaults = VmDefaults.of(services.settings)
    requests = [_request(index, vm, strategy, defaults, project) for index, vm in enumerate(body.vms)]
    try:
        cursor = await services.snapshot.peek_round_robin()
    except (RedisError, OSError) as error:
        raise SnapshotUnavailable(f"the capacity snapshot cannot be read: {error}") from error
    pods: dict[str, int] = {}
    if any(request.strategy is Strategy.USER_CONCENTRATED for request in requests):
        async with services.engine.connect() as connection:
            pods = (await project_pods(connection, [project]))[project]
    context = decision_context(services, cursor=cursor, seed=body.seed)
    outcomes = simulate(fleet, requests, context, project_pods=pods)
    placements = [
        SimulatedVm(
            index=index,
            name=request.name,
            strategy=request.strategy,
            host=outcome.decision.host_id,
            score=outcome.decision.score,
            reason=outcome.decision.reason,
            detail=None if outcome.decision.host_id else unplaced_detail(outcome.decision),
            considered=outcome.decision.considered,
            eligible=outcome.decision.eligible,
            rejections=dict(outcome.decision.rejections),
            cluster=outcome.decision.cluster,
            volumes=list(outcome.decision.volumes),
            examples={
                rule: [RejectedHost(host=host, reason=why) for host, why in found]
                for rule, found in outcome.examples.items()
            },
        )
        for index, (request, outcome) in enumerate(zip(requests, outcomes, strict=True))
    ]
    placed = sum(1 for p in placements if p.host is not None)
    return Simulation(
        placements=placements,
        placed=placed,
        unplaced=len(placements) - placed,
        without_hosts=sorted(body.without_hosts),
    )


async def failover(services: Services, shape: Shape) -> Failover:
    """Each zone's failover headroom (:mod:`vmsched_domain.ha_reserve`), from PostgreSQL's hosts."""
    reserve_hosts = services.settings.ha_reserve_hosts
    lost = max(reserve_hosts, 1)
    rooms = headroom(await read_reserve_hosts(services.engine), lost)
    asked = (shape.cpu, shape.memory_mb, shape.disk_gb, shape.gpu)
    zones = [
        ZoneFailover(
            zone=zone or None,
            headroom=Shape(cpu=room[0], memory_mb=room[1], disk_gb=room[2], gpu=room[3]),
            fits=max(0, min(room[row] // asked[row] for row in range(4) if asked[row] > 0)),
        )
        for zone, room in sorted(rooms.items())
    ]
    return Failover(reserve_hosts=reserve_hosts, hosts_lost=lost, zones=zones)


async def fleet_capacity(services: Services, shape: Shape) -> Capacity:
    """How many more VMs of ``shape`` the live fleet takes: in total, per zone and per host."""
    fleet = await live_fleet(services)
    demand = Demand(shape.cpu, shape.memory_mb, shape.disk_gb, shape.gpu)
    rooms = capacity(fleet, demand, decision_context(services), networks=frozenset(shape.networks))
    zones: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    for room in rooms:
        zone = zones[room.zone]
        zone[0] += room.fits
        zone[1] += 1 if room.fits else 0
    return Capacity(
        shape=shape,
        failover=await failover(services, shape),
        total=sum(room.fits for room in rooms),
        zones=[
            ZoneCapacity(zone=zone, fits=fits, hosts=hosts)
            for zone, (fits, hosts) in sorted(zones.items(), key=lambda item: (item[0] is None, item[0] or ""))
        ],
        hosts=[HostCapacity(host=r.host_id, zone=r.zone, fits=r.fits, refused_by=r.refused_by) for r in rooms],
        storage_pools=[
            PoolSpace(name=p.name, capacity_gb=p.capacity_gb, allocated_gb=p.allocated_gb, free_gb=p.free_gb)
            for p in sorted(fleet.columns.storage.shared.values(), key=lambda pool: pool.name)
        ],
    )
