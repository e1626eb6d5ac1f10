"""Planners: which of the eligible hosts the weighers and the strategy see (CloudStack's deployment
planners, before its host allocators).

``flat`` hands on every eligible host. ``cluster_first`` (CloudStack's FirstFitPlanner) ranks the
clusters (hosts sharing a ``cluster`` label) by their free capacity, counted over their hosts that
pass every filter: free vCPUs first, then free memory, then the cluster's name; the hosts of the
first one go on, and the strategy picks among them. Hosts without a ``cluster`` label are one group,
tried after every cluster. A cluster is chosen only if one of its hosts fits, so a planner never
makes a VM unschedulable: it narrows, as the weighers do, and the decision counts what it handed on
as ``preferred``.
"""

from __future__ import annotations

import numpy as np

from vmsched_contract.hierarchy import CLUSTER_LABEL
from vmsched_contract.planner import Planner
from vmsched_placement.fleet import BoolArray, FleetColumns
from vmsched_placement.model import CPU, MEMORY


def planned(
    planner: Planner, columns: FleetColumns, eligible: BoolArray, eligible_count: int
) -> tuple[BoolArray, int, str | None]:
    """The hosts ``planner`` hands on, their count, and the cluster chosen (None: every host, or the
    hosts without a cluster). ``eligible`` is returned itself (never written) by ``flat``."""
    if planner is Planner.FLAT:
        return eligible, eligible_count, None
    codes, values = columns.label_column(CLUSTER_LABEL)
    size = len(values) + 1  # the last slot: hosts without the label (NO_LABEL, -1)
    slots = codes + 1  # NO_LABEL counts at 0
    weights = eligible.astype(np.float64)
    hosts = np.bincount(slots, weights=weights, minlength=size)
    cpu = np.bincount(slots, weights=np.maximum(columns.free[CPU], 0.0) * weights, minlength=size)
    memory = np.bincount(slots, weights=np.maximum(columns.free[MEMORY], 0.0) * weights, minlength=size)
    names = {code + 1: name for name, code in values.items()}
    clusters = [slot for slot in range(1, size) if hosts[slot] > 0]
    if clusters:
        best = min(clusters, key=lambda slot: (-cpu[slot], -memory[slot], names[slot]))
        chosen: BoolArray = np.logical_and(eligible, np.equal(codes, best - 1))
        return chosen, int(hosts[best]), names[best]
    return eligible, eligible_count, None  # no eligible host has a cluster: the unclustered ones
