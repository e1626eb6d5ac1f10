"""``offline``: only hosts whose status is ``online`` and whose last heartbeat is recent enough.

``draining`` (and any other status) counts as not online. A host whose heartbeat is exactly
``offline_timeout`` old is still online (Orchard's ``Offline()``: strictly older is offline).
"""

from __future__ import annotations

import numpy as np

from vmsched_scheduler.placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_scheduler.placement.model import ONLINE, RequestVector


class OfflineFilter:
    NAME = "offline"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        # Same arithmetic as the per-host check (now - heartbeat <= timeout), so both agree to the bit.
        fresh = np.subtract(request.now, columns.last_heartbeat) <= request.offline_timeout
        return np.logical_and(fresh, columns.online, out=fresh)

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        if host.status != ONLINE:
            return f"offline: status {host.status}"
        age = request.now - host.last_heartbeat
        return f"offline: last heartbeat {seconds(age)}s ago (timeout {seconds(request.offline_timeout)}s)"


def seconds(value: float) -> str:
    """Seconds for people: ``42``, ``15.4``."""
    text = f"{value:.1f}"
    return text.removesuffix(".0")
