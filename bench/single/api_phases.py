"""The API's own account of each request phase (``vmsched_api_request_phase_seconds``), read from
/metrics before and after a phase: where a request waits."""

from __future__ import annotations

import urllib.request
from typing import Any

PHASE_METRIC = "vmsched_api_request_phase_seconds"


def scrape_phases(api_url: str) -> dict[str, dict[str, Any]]:
    """Per phase: the histogram's buckets (le -> cumulative count), sum and count, as /metrics says."""
    with urllib.request.urlopen(f"{api_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    phases: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.startswith(PHASE_METRIC):
            continue
        name, _, value = line.rpartition(" ")
        labels = dict(part.split("=", 1) for part in name[name.index("{") + 1 : name.rindex("}")].split(","))
        labels = {key: raw.strip('"') for key, raw in labels.items()}
        entry = phases.setdefault(labels["phase"], {"buckets": {}, "sum": 0.0, "count": 0.0})
        if name.startswith(f"{PHASE_METRIC}_bucket"):
            entry["buckets"][float(labels["le"])] = float(value)
        elif name.startswith(f"{PHASE_METRIC}_sum"):
            entry["sum"] = float(value)
        elif name.startswith(f"{PHASE_METRIC}_count"):
            entry["count"] = float(value)
    return phases


def bucket_quantile(buckets: dict[float, float], q: float) -> float:
    """The q-quantile (0..1) of a cumulative histogram, interpolated within its bucket (Prometheus'
    histogram_quantile); NaN when empty."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return float("nan")
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return previous_bound
            share = (rank - previous_count) / (count - previous_count) if count > previous_count else 0.0
            return previous_bound + (bound - previous_bound) * share
        previous_bound, previous_count = bound, count
    return previous_bound


def phase_breakdown(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per phase between two scrapes: how many, mean, p50 and p99 in ms."""
    out: dict[str, Any] = {}
    for phase, now in after.items():
        then = before.get(phase, {"buckets": {}, "sum": 0.0, "count": 0.0})
        count = now["count"] - then["count"]
        if count <= 0:
            continue
        buckets = {le: n - then["buckets"].get(le, 0.0) for le, n in now["buckets"].items()}
        out[phase] = {
            "count": int(count),
            "mean_ms": round((now["sum"] - then["sum"]) / count * 1000, 3),
            "p50_ms": round(bucket_quantile(buckets, 0.5) * 1000, 3),
            "p99_ms": round(bucket_quantile(buckets, 0.99) * 1000, 3),
        }
    return out
