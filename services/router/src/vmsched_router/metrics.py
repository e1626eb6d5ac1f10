"""The router's Prometheus metrics (served at /metrics with the process's own)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CELL_UP = Gauge("vmsched_router_cell_up", "1 when the cell's summary was read at the last refresh", ["cell"])
CELL_LOAD = Gauge("vmsched_router_cell_load", "The cell's load (0..1) by its last summary", ["cell"])
CELL_WAITING = Gauge("vmsched_router_cell_waiting_vms", "VMs waiting for room in the cell", ["cell"])
FORWARDED = Counter(
    "vmsched_router_forwarded_total",
    "Requests forwarded to a cell, by route and answer class",
    ["cell", "route", "code"],
)
FORWARD_SECONDS = Histogram(
    "vmsched_router_forward_seconds",
    "Time a cell took to answer a forwarded request",
    ["cell"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
RETRIED = Counter(
    "vmsched_router_retried_vms_total", "VMs a cell answered unschedulable that were tried on the next cell", ["cell"]
)
UNROUTABLE = Counter("vmsched_router_unroutable_total", "Create requests refused for want of a reachable cell")
