"""PostgreSQL's guard of the HA reserve (VMSCHED_HA_RESERVE_HOSTS, :mod:`vmsched_domain.ha_reserve`):
the settlement's check that a round's placements leave every zone its failover headroom, whatever
the pass's own view said. Scheduler replicas decide at the same instant from the headroom each read
when its pass began; without this, each could place up to all of it.

A zone's headroom depends on every host of the zone, so the settlements that place VMs take one
advisory lock while the reserve is kept (after their hosts' rows: nothing is locked after it, and a
settlement waiting for it holds no host another needs). Then the headroom is read from the hosts'
rows and the round's placements are walked in order, each refused if its zone has no room left for
it, or counted if it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from vmsched_domain.ha_reserve import NOTHING, booked, headroom, shortfall
from vmsched_pg.failover import reserve_hosts
from vmsched_scheduler.ports import Placement

# pg_advisory_xact_lock's key for the reserve ("vmsched-ha" as a number; any constant of our own).
RESERVE_LOCK_KEY = 0x766D_7363_6861
_LOCK = text("SELECT pg_advisory_xact_lock(:key)")


async def refused_by_reserve(connection: AsyncConnection, placements: Sequence[Placement], kept: int) -> set[UUID]:
    """The placements (by VM id) that would eat into their zone's failover headroom, given the
    placements before each in ``placements``; none when no reserve is ``kept``. The caller holds the
    hosts' row locks."""
    if kept <= 0 or not placements:
        return set()
    await connection.execute(_LOCK, {"key": RESERVE_LOCK_KEY})
    hosts = await reserve_hosts(connection)
    zones = {host.host_id: host.zone for host in hosts}
    room = headroom(hosts, kept)
    refused: set[UUID] = set()
    for placement in placements:
        zone = zones.get(placement.host_id)
        if zone is None:  # a host that takes no VM now: the host's own guard refuses it
            continue
        resources = placement.resources
        demand = (resources.cpu, resources.memory_mb, resources.disk_gb, resources.gpu)
        if shortfall(demand, room.get(zone, NOTHING)) is not None:
            refused.add(placement.vm_id)
        else:
            room[zone] = booked(room[zone], demand)
    return refused
