"""``storage``: every volume the VM asks for goes to a pool the host reaches that carries the volume's
tags and has room, first fit (``vmsched_domain.storage``): a host's own local pools and the shared
pools it reaches, whose space is counted once for all their hosts.

A VM without volumes costs nothing; one with volumes a few vectorised passes per volume and pool name
(:meth:`~vmsched_placement.storage_columns.StorageColumns.mask`).
"""

from __future__ import annotations

from vmsched_domain.storage import STORAGE, reason
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class StorageFilter:
    NAME = STORAGE

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if not request.volumes:
            return None
        return columns.storage.mask(request.volumes)

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        columns = fleet.columns
        return reason(request.volumes, columns.storage.rooms(columns.hosts[index]))
