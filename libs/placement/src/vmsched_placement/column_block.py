"""The fleet's columns for a run of hosts, built in one pass from their states (a fleet's
construction, a batch of new hosts): what FleetColumns copies into its arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from vmsched_placement.model import ONLINE, Demand, HostState

if TYPE_CHECKING:
    from vmsched_placement.fleet import BoolArray, FloatArray


class ColumnBlock:
    """Columns for a run of hosts, built in one pass (fleet construction and batch inserts)."""

    __slots__ = (
        "allocated",
        "divisor",
        "effective",
        "free",
        "last_heartbeat",
        "load",
        "online",
        "paused",
        "utilisation",
    )

    def __init__(self, hosts: Sequence[HostState]) -> None:
        count = len(hosts)
        self.online: BoolArray = np.fromiter((h.status == ONLINE for h in hosts), np.bool_, count)
        self.last_heartbeat: FloatArray = np.fromiter((h.last_heartbeat for h in hosts), np.float64, count)
        self.paused: BoolArray = np.fromiter((h.scheduling_paused for h in hosts), np.bool_, count)
        self.effective: FloatArray = resource_rows([h.effective_capacity for h in hosts])
        self.allocated: FloatArray = resource_rows([h.allocated for h in hosts])
        self.free: FloatArray = self.effective - self.allocated
        self.divisor: FloatArray = np.maximum(self.effective, 1.0)
        self.utilisation: FloatArray = self.allocated / self.divisor
        self.load: FloatArray = self.utilisation[:2].copy()
        measured = [(index, host.measured_load) for index, host in enumerate(hosts) if host.usage is not None]
        if measured:
            rows = np.fromiter((index for index, _ in measured), np.intp, len(measured))
            self.load[:, rows] = np.array([load for _, load in measured], dtype=np.float64).T


def resource_rows(amounts: Sequence[Demand]) -> FloatArray:
    flat = np.fromiter((value for amount in amounts for value in amount.as_tuple()), np.float64, 4 * len(amounts))
    return np.ascontiguousarray(flat.reshape(len(amounts), 4).T)
