"""Prometheus metrics every service may record; each is named once, here, prefixed ``vmsched_``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from vmsched_common.settings import Strategy

DEAD_LETTERED = Counter(
    "vmsched_dead_lettered_messages_total",
    "Messages a consumer dead-lettered because they could not be decoded or validated",
    ["queue"],
)
TRANSIENT_RETRIES = Counter(
    "vmsched_transient_retries_total",
    "Handler runs repeated after a transient error (a server unreachable)",
    ["queue"],
)
PLACEMENTS = Counter(
    "vmsched_placements_total",
    "Placement decisions by strategy and outcome (scheduled, unschedulable, duplicate)",
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
    "Claims lost to another scheduler or a stale snapshot; the VM moved on to the next host",
    ["stage"],
)
BATCH_SIZE = Histogram(
    "vmsched_batch_size",
    "Items written per round trip by a micro-batch (placements, running reports, heartbeats, publish marks)",
    ["batch"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
HOSTS = Gauge("vmsched_hosts", "Known hosts by status", ["status"])
RESOURCE_CAPACITY = Gauge("vmsched_resource_capacity", "Capacity of online hosts", ["resource"])
RESOURCE_ALLOCATED = Gauge("vmsched_resource_allocated", "Allocated resources on online hosts", ["resource"])

# Series that exist from the start, at zero: a dashboard's rate() needs a first sample, and "no
# conflicts yet" should read 0, not "no data".
PLACEMENT_OUTCOMES = ("scheduled", "unschedulable", "duplicate")
CLAIM_STAGES = ("redis", "postgres")


def _initialise_series() -> None:
    for strategy in Strategy:
        for outcome in PLACEMENT_OUTCOMES:
            PLACEMENTS.labels(strategy.value, outcome)
    for stage in CLAIM_STAGES:
        CLAIM_CONFLICTS.labels(stage)


_initialise_series()
