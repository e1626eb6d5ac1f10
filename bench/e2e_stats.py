"""Pure arithmetic of the end-to-end benchmark: percentiles, sustained rates, packing bounds.

No I/O, so each rule has a fast unit test (tests/unit/test_e2e_stats.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

RESOURCES = ("cpu", "memory_mb", "disk_gb", "gpu")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between ranks; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def sustained_rate(times: Sequence[float], trim: float = 0.1) -> float:
    """Events per second in the steady middle of a burst: the ``trim`` fraction of events at each
    end (ramp-up, drain) is left out, and the rest counted over the time they span. 0 when too few."""
    if len(times) < 10:
        return 0.0
    ordered = sorted(times)
    first = int(len(ordered) * trim)
    last = len(ordered) - 1 - first
    span = ordered[last] - ordered[first]
    return (last - first) / span if span > 0 else 0.0


def hosts_lower_bound(demands: Sequence[Mapping[str, int]], capacities: Sequence[Mapping[str, int]]) -> int:
    """The fewest hosts that could hold ``demands``, by volume alone: for each resource, how many of
    the largest hosts it takes for their summed capacity to reach the summed demand; the largest
    count over resources. (With identical hosts: max over resources of ceil(total / per-host).)"""
    bound = 0
    for resource in RESOURCES:
        need = sum(d.get(resource, 0) for d in demands)
        if need <= 0:
            continue
        have = 0
        for count, capacity in enumerate(sorted((c.get(resource, 0) for c in capacities), reverse=True), 1):
            have += capacity
            if have >= need:
                bound = max(bound, count)
                break
        else:
            raise ValueError(f"{resource}: demand {need} exceeds the whole fleet ({have})")
    return bound


def utilisation_spread(used: Sequence[float], capacity: Sequence[float]) -> dict[str, float]:
    """How evenly load is spread: mean, standard deviation, min and max of used/capacity per host."""
    shares = [u / c for u, c in zip(used, capacity, strict=True) if c > 0]
    if not shares:
        return {"mean": math.nan, "stdev": math.nan, "min": math.nan, "max": math.nan}
    mean = sum(shares) / len(shares)
    stdev = math.sqrt(sum((s - mean) ** 2 for s in shares) / len(shares))
    return {"mean": mean, "stdev": stdev, "min": min(shares), "max": max(shares)}


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)
