"""``fewest_vms`` and ``most_vms`` (Orchard's DistributeLoad and OptimizeUtilization): hosts ranked
by how many VMs they run, whatever their size.

Score = the host's VM count (``fewest_vms``), or minus it (``most_vms``); ties go to the lowest host
id. The count is the snapshot's (every VM holding the host: running, stopped, migrating in or out)
plus the round's own bookings, kept by the fleet as a derived column.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vmsched_contract.strategy import Strategy
from vmsched_placement.fleet import FleetColumns, FloatArray
from vmsched_placement.model import DecisionContext, RequestVector
from vmsched_placement.strategies.scoring import LowestScoreWins


@dataclass(frozen=True, slots=True)
class VmCounts:
    """Every host's VM count times ``sign`` (a :class:`~vmsched_placement.fleet.DerivedColumn`)."""

    sign: float

    @property
    def key(self) -> float:
        return self.sign

    def compute(self, columns: FleetColumns) -> FloatArray:
        counts = np.fromiter((host.vm_count for host in columns.hosts), np.float64, len(columns))
        return np.multiply(counts, self.sign, out=counts)

    def row(self, columns: FleetColumns, index: int) -> float:
        return float(columns.hosts[index].vm_count) * self.sign


class FewestVms(LowestScoreWins):
    NAME = Strategy.FEWEST_VMS
    READS_MEASURED_USAGE = False

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        return columns.derived(_FEWEST)


class MostVms(LowestScoreWins):
    NAME = Strategy.MOST_VMS
    READS_MEASURED_USAGE = False

    def scores(self, columns: FleetColumns, request: RequestVector, context: DecisionContext) -> FloatArray | None:
        return columns.derived(_MOST)


_FEWEST = VmCounts(1.0)
_MOST = VmCounts(-1.0)
