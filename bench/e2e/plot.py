"""The chart saved beside the results: throughput and latency against the offered rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.e2e.plan import LATENCY_RATE, P99_TO_SCHEDULED_MS_TARGET, SCHEDULERS, THROUGHPUT_TARGETS


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for size, colour in zip(result["fleets"], ("tab:blue", "tab:orange", "tab:green", "tab:purple"), strict=False):
        # Points in order of offered rate: the single-POST phases sit between the batch steps.
        points = sorted(
            (p for p in size["phases"].values() if p["offered_per_s"] is not None), key=lambda p: p["offered_per_s"]
        )
        offered = [p["offered_per_s"] for p in points]
        sat = size["phases"]["saturation"]
        left.plot(
            offered, [p["achieved_per_s"] for p in points], marker="o", color=colour, label=f"{size['hosts']} hosts"
        )
        left.axhline(sat["achieved_per_s"], linestyle=":", color=colour)
        right.plot(offered, [p["p99_ms"] for p in points], marker="o", color=colour, label=f"{size['hosts']} hosts p99")
        right.plot(
            offered,
            [p["p50_ms"] for p in points],
            marker="x",
            linestyle="--",
            color=colour,
            label=f"{size['hosts']} hosts p50",
        )
    top = max(max(p["offered_per_s"] or 0 for p in s["phases"].values()) for s in result["fleets"])
    left.plot([0, top], [0, top], color="grey", linewidth=0.8, label="achieved = offered")
    for hosts, goal in THROUGHPUT_TARGETS.items():
        left.axhline(goal, color="red", linewidth=0.8, linestyle="--", label=f"target {goal:,.0f}/s at {hosts:,} hosts")
    left.set(
        xlabel=f"offered VMs/s ({LATENCY_RATE:g}: single POSTs; the rest: batches)", ylabel="placements/s end to end"
    )
    left.set_title("Throughput (dotted: saturation)")
    right.axhline(
        P99_TO_SCHEDULED_MS_TARGET,
        color="red",
        linewidth=0.8,
        linestyle="--",
        label=f"target: p99 POST to scheduled {P99_TO_SCHEDULED_MS_TARGET:g} ms at {LATENCY_RATE:g}/s",
    )
    right.set(xlabel="offered VMs/s", ylabel="ms, request sent to command received", yscale="log")
    right.set_title("Latency end to end")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    fig.suptitle(f"vmsched end to end, {result['recorded_at'][:10]}, {SCHEDULERS} schedulers, 2 cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
