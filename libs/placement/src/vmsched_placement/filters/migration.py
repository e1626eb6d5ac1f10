"""``migration``: the target of a migration must be a host whose agent can migrate VMs (it declares
the ``migrate`` capability), and the host asked for when one is named. A placement sets no
constraint here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


class MigrationFilter:
    NAME = "migration"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if request.migration is None:
            return None
        capable = columns.derived(CanMigrate())
        wanted = request.migration.target_host
        if wanted is None:
            return capable
        passes = np.zeros(len(columns), dtype=np.bool_)
        index = columns.index_of(wanted)
        if index is not None:
            passes[index] = capable[index]
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        wanted = request.migration.target_host if request.migration is not None else None
        if wanted is not None and host.id != wanted:
            return f"migration: not the host asked for ({wanted})"
        return "migration: its agent cannot migrate VMs (it does not declare the 'migrate' capability)"


@dataclass(frozen=True, slots=True)
class CanMigrate:
    """Which hosts' agents can migrate VMs, as a column the fleet keeps (see ``FleetColumns.derived``)."""

    @property
    def key(self) -> None:
        return None

    def compute(self, columns: FleetColumns) -> BoolArray:
        return np.fromiter((host.can_migrate for host in columns.hosts), np.bool_, len(columns))

    def row(self, columns: FleetColumns, index: int) -> bool:
        return columns.hosts[index].can_migrate
