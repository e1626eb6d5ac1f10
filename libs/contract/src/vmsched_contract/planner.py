"""The planners: how the hosts a strategy ranks are narrowed first (CloudStack's deployment planners)."""

from __future__ import annotations

from enum import StrEnum


class Planner(StrEnum):
    """Which eligible hosts the strategy ranks."""

    FLAT = "flat"  # every host that passes the filters (default)
    # CloudStack's FirstFitPlanner: clusters (the hosts' ``cluster`` label) ranked by their free
    # capacity, then the strategy among the hosts of the first cluster that has a host that fits.
    CLUSTER_FIRST = "cluster_first"
