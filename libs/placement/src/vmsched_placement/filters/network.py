"""``network``: the host reaches every network the VM needs (CloudStack's "network reachable from
host"; its agent's heartbeat lists them). A VM that needs none costs nothing; otherwise each distinct
set of networks in the fleet is judged once (:class:`~vmsched_placement.host_keys.InternedColumn`).
"""

from __future__ import annotations

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class NetworkFilter:
    NAME = "network"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        wanted = request.networks
        if not wanted:
            return None
        return columns.keys.networks.mask(wanted.issubset, wanted)

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        missing = sorted(request.networks - fleet.host_at(index).networks)
        return f"network: host does not reach {', '.join(missing)}"
