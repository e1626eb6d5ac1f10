"""``excluded``: hosts that already failed this VM are not tried again (CloudStack's ExcludeList),
nor, once ``exclude_cluster_after`` of them are in one cluster (the hosts' ``cluster`` label,
``VMSCHED_EXCLUDE_CLUSTER_AFTER``), any host of that cluster (CloudStack's avoid set of clusters).
A migration's source is left out too, and is not counted as a failure of its cluster."""

from __future__ import annotations

from collections import Counter

import numpy as np

from vmsched_contract.hierarchy import CLUSTER_LABEL
from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


def excluded_clusters(columns: FleetColumns, request: RequestVector) -> dict[str, int]:
    """The clusters left out whole, with how many of the hosts that failed the VM each holds."""
    after = request.exclude_cluster_after
    if after <= 0 or len(request.exclude_hosts) < after:
        return {}
    source = request.migration.source if request.migration is not None else None
    counted: Counter[str] = Counter()
    for host_id in request.exclude_hosts:
        index = columns.index_of(host_id) if host_id != source else None
        cluster = None if index is None else columns.hosts[index].labels.get(CLUSTER_LABEL)
        if cluster is not None:
            counted[cluster] += 1
    return {cluster: failed for cluster, failed in counted.items() if failed >= after}


class ExcludedFilter:
    NAME = "excluded"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        if not request.exclude_hosts:
            return None
        clusters = excluded_clusters(columns, request)
        if clusters:
            passes: BoolArray = np.logical_not(columns.label_in_mask(CLUSTER_LABEL, clusters))
        else:
            passes = np.ones(len(columns), dtype=np.bool_)
        for host_id in request.exclude_hosts:
            index = columns.index_of(host_id)
            if index is not None:
                passes[index] = False
        return passes

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        host = fleet.host_at(index)
        if host.id in request.exclude_hosts:
            return "excluded: excluded on retry"
        cluster = host.labels.get(CLUSTER_LABEL, "")
        failed = excluded_clusters(fleet.columns, request).get(cluster, 0)
        return f"excluded: its cluster {cluster} is excluded ({failed} hosts there failed the VM)"
