"""``ha_reserve``: the host's zone keeps room to restart the VMs of its N largest hosts after this VM
(VMSCHED_HA_RESERVE_HOSTS; vSphere HA's admission control). The headroom of each zone is
:func:`vmsched_domain.ha_reserve.headroom`'s; the hosts of a zone pass or fail together."""

from __future__ import annotations

import numpy as np

from vmsched_domain.ha_reserve import NO_ZONE, RESOURCE_NAMES, ZONE_LABEL, shortfall
from vmsched_placement.fleet import NO_LABEL, BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


def _demand(request: RequestVector) -> tuple[int, int, int, int]:
    return (request.cpu, request.memory_mb, request.disk_gb, request.gpu)


class HaReserveFilter:
    NAME = "ha_reserve"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        reserve = request.reserve
        if reserve is None:
            return None
        demand = _demand(request)
        codes, values = columns.label_column(ZONE_LABEL)
        mask: BoolArray = np.zeros(len(columns), dtype=np.bool_)
        for zone, room in reserve.headroom.items():
            if shortfall(demand, room) is not None:
                continue
            code = NO_LABEL if zone == NO_ZONE else values.get(zone)
            if code is not None:
                np.logical_or(mask, np.equal(codes, code), out=mask)
        return mask

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        assert request.reserve is not None  # only hosts the mask failed are explained
        zone = fleet.host_at(index).labels.get(ZONE_LABEL, NO_ZONE)
        room = request.reserve.headroom.get(zone, (0, 0, 0, 0))
        row = shortfall(_demand(request), room)
        row = 0 if row is None else row
        where = f"zone {zone}" if zone else "the fleet"
        return (
            f"ha_reserve: needs {_demand(request)[row]} {RESOURCE_NAMES[row]}, {where} keeps room to restart the VMs "
            f"of its {request.reserve.reserve_hosts} largest host(s) and has {max(room[row], 0)} to spare"
        )
