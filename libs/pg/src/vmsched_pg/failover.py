"""The hosts as the HA reserve counts them (:mod:`vmsched_domain.ha_reserve`), read from PostgreSQL:
those that take VMs (online, not paused: a fenced or draining host does not), each with its
effective capacity, its allocations and the allocations of its VMs that never restart."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vmsched_contract.messages import HostStatus, RestartPolicy
from vmsched_domain.fit import RESOURCES, allocatable, ratio_of
from vmsched_domain.ha_reserve import Amounts, ReserveHost, zone_of
from vmsched_pg.rows import HOST_FIELDS, columns, host_from_row
from vmsched_pg.shares import SHARES

_FIELDS = [rule.field for rule in RESOURCES]
_HOSTS = text(
    f"""
    SELECT {columns(HOST_FIELDS, "h")}, {", ".join(f"coalesce(u.{f}, 0) AS never_{f}" for f in _FIELDS)}
      FROM hosts h
      LEFT JOIN (SELECT s.host_id, {", ".join(f"sum(s.{f}) AS {f}" for f in _FIELDS)}
                   FROM ({SHARES}) s JOIN vms v ON v.id = s.vm_id
                  WHERE v.restart_policy = '{RestartPolicy.NEVER.value}'
                  GROUP BY s.host_id) u ON u.host_id = h.id
     WHERE h.status = '{HostStatus.ONLINE.value}' AND NOT h.scheduling_paused
     ORDER BY h.id
    """
)


def _amounts(values: list[int]) -> Amounts:
    return (values[0], values[1], values[2], values[3])


async def reserve_hosts(connection: AsyncConnection) -> list[ReserveHost]:
    hosts = []
    for row in await connection.execute(_HOSTS):
        host = host_from_row(row)
        effective = [
            allocatable(
                getattr(host.capacity, rule.field), getattr(host.reserved, rule.field), ratio_of(rule, host.overcommit)
            )
            for rule in RESOURCES
        ]
        hosts.append(
            ReserveHost(
                host_id=host.id,
                zone=zone_of(host.labels),
                effective=_amounts(effective),
                allocated=_amounts([getattr(host.allocated, f) for f in _FIELDS]),
                unrestartable=_amounts([int(getattr(row, f"never_{f}")) for f in _FIELDS]),
            )
        )
    return hosts


async def read_reserve_hosts(engine: AsyncEngine) -> list[ReserveHost]:
    async with engine.connect() as connection:
        return await reserve_hosts(connection)
