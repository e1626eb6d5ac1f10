"""``offline``: only hosts whose status is ``online`` and whose last heartbeat is recent enough.

``draining`` (and any other status) counts as not online. A host whose heartbeat is exactly
``offline_timeout`` old is still online (Orchard's ``Offline()``: strictly older is offline).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import ONLINE, RequestVector


class OfflineFilter:
    NAME = "offline"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        # Every decision of a round asks at the same instant: the fleet keeps the answer.
        return columns.derived(Available(request.now, request.offline_timeout))

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        if host.status != ONLINE:
            return f"offline: status {host.status}"
        age = request.now - host.last_heartbeat
        return f"offline: last heartbeat {seconds(age)}s ago (timeout {seconds(request.offline_timeout)}s)"


@dataclass(frozen=True, slots=True)
class Available:
    """Which hosts are online at ``now``, as a column the fleet keeps (see ``FleetColumns.derived``)."""

    now: float
    offline_timeout: float

    @property
    def key(self) -> tuple[float, float]:
        return self.now, self.offline_timeout

    def compute(self, columns: FleetColumns) -> BoolArray:
        # Same arithmetic as ``row`` and the per-host check (now - heartbeat <= timeout): the same bits.
        fresh = np.subtract(self.now, columns.last_heartbeat) <= self.offline_timeout
        return np.logical_and(fresh, columns.online, out=fresh)

    def row(self, columns: FleetColumns, index: int) -> bool:
        return bool(self.now - columns.last_heartbeat[index] <= self.offline_timeout and columns.online[index])


def seconds(value: float) -> str:
    """Seconds for people: ``42``, ``15.4``."""
    text = f"{value:.1f}"
    return text.removesuffix(".0")
