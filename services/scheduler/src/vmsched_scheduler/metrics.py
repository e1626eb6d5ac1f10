"""The scheduler's Prometheus metrics (served on its own /metrics, VMSCHED_METRICS_PORT)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from vmsched_contract.strategy import Strategy

PLACEMENTS = Counter(
    "vmsched_placements_total",
    "Placement decisions by strategy and outcome (scheduled, unschedulable, waiting, preempted, reserved, duplicate)",
    ["strategy", "outcome"],
)
DECISION_SECONDS = Histogram(
    "vmsched_decision_seconds",
    "Time to choose a host for one VM (filters and strategy, in memory)",
    buckets=(0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1),
)
REQUEST_TO_ASSIGNMENT_SECONDS = Histogram(
    "vmsched_request_to_assignment_seconds",
    "Time from the VM's creation in the API to its assignment being committed",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
CLAIM_CONFLICTS = Counter(
    "vmsched_claim_conflicts_total",
    "Claims refused (another scheduler took the room first, or the snapshot was stale); the VM was decided again",
    ["stage"],
)
ROUND_VMS = Counter("vmsched_round_vms_total", "VMs a scheduling round took, by what became of them", ["outcome"])

# Series that exist from the start, at zero: a dashboard's rate() needs a first sample, and "no
# conflicts yet" should read 0, not "no data".
PLACEMENT_OUTCOMES = ("scheduled", "unschedulable", "duplicate")
CLAIM_STAGES = ("redis", "postgres")
ROUND_OUTCOMES = ("assigned", "not_placed", "ignored", "later")


def _initialise_series() -> None:
    for strategy in Strategy:
        for outcome in PLACEMENT_OUTCOMES:
            PLACEMENTS.labels(strategy.value, outcome)
    for stage in CLAIM_STAGES:
        CLAIM_CONFLICTS.labels(stage)
    for outcome in ROUND_OUTCOMES:
        ROUND_VMS.labels(outcome)


_initialise_series()
