"""The placement strategies a VM or the cluster default may name."""

from __future__ import annotations

from enum import StrEnum


class Strategy(StrEnum):
    """How a scheduler picks one host among those that pass every filter."""

    LEAST_LOADED = "least_loaded"
    BEST_FIT = "best_fit"
    ROUND_ROBIN = "round_robin"
    RANDOM = "random"
    LEAST_UTILIZED = "least_utilized"
    FIRST_FIT = "first_fit"  # CloudStack's FirstFitAllocator: the first host in id order that fits
    FEWEST_VMS = "fewest_vms"  # Orchard's DistributeLoad: the host running the fewest VMs
    MOST_VMS = "most_vms"  # Orchard's OptimizeUtilization: the host running the most VMs
    USER_CONCENTRATED = "user_concentrated"  # CloudStack's UserConcentratedPodAllocator: the project's pod


def valid_strategies() -> str:
    return ", ".join(s.value for s in Strategy)


# The longest a VM may wait for room (wait_s): a week.
MAX_WAIT_S = 7 * 24 * 3600
