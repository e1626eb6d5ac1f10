"""Prometheus metrics of the parts every service shares (consumers, batches). A service's own metrics
are named in its own ``metrics`` module, so each process's /metrics shows only what it records."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
BATCH_SIZE = Histogram(
    "vmsched_batch_size",
    "Items written per round trip by a micro-batch (placements, running reports, heartbeats, publish marks)",
    ["batch"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
