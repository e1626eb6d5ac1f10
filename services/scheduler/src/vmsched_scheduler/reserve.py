"""A pass's HA reserve (VMSCHED_HA_RESERVE_HOSTS, :mod:`vmsched_domain.ha_reserve`): each zone's
failover headroom as PostgreSQL's hosts give it when the pass begins, less the pass's own choices
(booked as they are made, as capacity is on the fleet: the tenth VM decided in a pass sees the room
the nine before it took). Placements only: a migration moves room, it takes none."""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_domain.ha_reserve import NOTHING, Amounts, ReserveHost, booked, headroom, shortfall, zone_of
from vmsched_pg.failover import read_reserve_hosts
from vmsched_placement import Fleet
from vmsched_placement.model import FailoverReserve


class ReserveSource(Protocol):
    reserve_hosts: int

    async def hosts(self) -> list[ReserveHost]:
        """The hosts that take VMs, as the reserve counts them."""
        ...


class PostgresReserve:
    def __init__(self, engine: AsyncEngine, reserve_hosts: int) -> None:
        self.engine = engine
        self.reserve_hosts = reserve_hosts

    async def hosts(self) -> list[ReserveHost]:
        return await read_reserve_hosts(self.engine)


class RoundReserve:
    def __init__(self, reserve_hosts: int, room: dict[str, Amounts]) -> None:
        self.reserve_hosts = reserve_hosts
        self.room = room

    @classmethod
    async def load(cls, source: ReserveSource | None) -> RoundReserve | None:
        """None when no reserve is kept (VMSCHED_HA_RESERVE_HOSTS=0)."""
        if source is None or source.reserve_hosts <= 0:
            return None
        return cls(source.reserve_hosts, headroom(await source.hosts(), source.reserve_hosts))

    def failover(self) -> FailoverReserve:
        """The engine's view: a copy of the headroom now."""
        return FailoverReserve(self.reserve_hosts, dict(self.room))

    def admits(self, fleet: Fleet, host_id: str, demand: Amounts) -> bool:
        """Whether a VM of ``demand`` on ``host_id`` leaves its zone's headroom; booked if it does."""
        host = fleet.host(host_id)
        if host is None or shortfall(demand, self.room.get(zone_of(host.labels), NOTHING)) is not None:
            return False
        self.book(fleet, host_id, demand)
        return True

    def book(self, fleet: Fleet, host_id: str, demand: Amounts) -> None:
        """Take a VM placed on ``host_id`` off its zone's headroom, for the decisions after it."""
        host = fleet.host(host_id)
        if host is None:
            return
        zone = zone_of(host.labels)
        if zone in self.room:
            self.room[zone] = booked(self.room[zone], demand)
