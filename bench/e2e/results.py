"""A run's figures per phase (medians over runs), the broker ceiling, the verdicts against the
targets, and the table printed at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench.e2e.plan import (
    LATENCY_RATE,
    MESSAGES_PER_VM_TARGET,
    P99_TO_SCHEDULED_MS_TARGET,
    SCHEDULER_CPU_MS_TARGET,
    THROUGHPUT_TARGETS,
)
from bench.e2e_stats import median


def by_phase(size: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per phase, the median over runs of each figure (a run whose sweep stopped early lacks the
    later steps; their medians are over the runs that have them)."""
    merged: dict[str, dict[str, Any]] = {}
    names = list(dict.fromkeys(p["phase"] for run in size["runs"] for p in run["phases"]))
    for name in names:
        rows = [p for run in size["runs"] for p in run["phases"] if p["phase"] == name]
        offered = [r["offered_per_s"] for r in rows if r["offered_per_s"] is not None]
        merged[name] = {
            "offered_per_s": round(median(offered), 1) if offered else None,
            "batch": rows[0]["batch"],
            "runs": len(rows),
            **{
                key: round(median([r[key] for r in rows if r[key] is not None]), 2)
                for key in ("achieved_per_s", "accepted_per_s", "p50_ms", "p95_ms", "p99_ms")
            },
            "missing": sum(r["missing"] for r in rows),
        }
        segments = [r["segments_ms"] for r in rows if r.get("segments_ms")]
        if segments:
            merged[name]["segments_ms"] = {
                leg: {q: round(median([seg[leg][q] for seg in segments]), 1) for q in ("p50", "p99")}
                for leg in segments[0]
            }
        costs = [r["cpu_ms_per_vm"] for r in rows if r.get("cpu_ms_per_vm")]
        if costs:
            components = list(dict.fromkeys(c for cost in costs for c in cost))
            merged[name]["cpu_ms_per_vm"] = {
                c: round(median([cost[c] for cost in costs if c in cost]), 3) for c in components
            }
            merged[name]["cores_busy"] = round(median([r["cores_busy"] for r in rows]), 2)
    return merged


def broker_floor(results: Path) -> dict[str, Any] | None:
    """The newest ``broker-floor-*.json`` measured over 1,000 agent queues (``make bench`` writes one
    first), or None."""
    floors = sorted(results.glob("broker-floor-*.json"))
    for path in reversed(floors):
        floor: dict[str, Any] = json.loads(path.read_text())
        hops = floor.get("hops", [])
        if floor.get("agent_queues") == 1000 and any(
            h["queue"] == "classic" and not h.get("persistent", True) for h in hops
        ):
            return {"file": path.name, **floor}
    return None


def broker_ceiling(size: dict[str, Any], floor: dict[str, Any]) -> dict[str, Any] | None:
    """The placements/s RabbitMQ alone would allow this machine for the messages a batched placement
    cost in this run: each quorum-queue message (vm.*) at the floor's quorum hop, each agent command at
    its transient classic hop, both flat out, over every core; and the run's share of it."""
    counted = (size.get("messages") or {}).get("batches_of_100")
    if not counted or not counted["vms"]:
        return None
    per_key = counted["by_routing_key"]
    quorum_messages = (
        sum(v["messages"] for k, v in per_key.items() if k not in ("agent command", "vm.status of earlier VMs"))
        / counted["vms"]
    )
    command_messages = per_key.get("agent command", {"messages": 0})["messages"] / counted["vms"]
    hop = {
        kind: next(
            h["broker_us_per_message"]
            for h in floor["hops"]
            if h["offered_per_s"] is None
            and (h["queue"] == "quorum" if kind == "quorum" else h["queue"] == "classic" and not h["persistent"])
        )
        for kind in ("quorum", "command")
    }
    us_per_vm = quorum_messages * hop["quorum"] + command_messages * hop["command"]
    ceiling = (floor.get("cpu_count") or os.cpu_count() or 1) * 1e6 / us_per_vm
    achieved = size["phases"]["saturation"]["achieved_per_s"]
    return {
        "floor": floor["file"],
        "broker_us_per_vm": round(us_per_vm, 1),
        "ceiling_per_s": round(ceiling),
        "achieved_over_ceiling": round(achieved / ceiling, 3),
    }


def verdicts(sizes: list[dict[str, Any]], extra: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 12's targets, per fleet size where they depend on it."""
    out: dict[str, Any] = {}

    def judge(name: str, value: float | None, target: str, met: bool) -> None:
        out[name] = {"value": value, "target": target, "met": value is not None and met}

    for size in sizes:
        hosts, phases = size["hosts"], size["phases"]
        throughput = phases["saturation"]["achieved_per_s"]
        goal = THROUGHPUT_TARGETS.get(hosts)
        if goal is not None:
            judge(f"throughput_per_s@{hosts}", throughput, f">= {goal:g}", throughput >= goal)
        scheduler = (phases["saturation"].get("cpu_ms_per_vm") or {}).get("scheduler")
        judge(
            f"scheduler_cpu_ms_per_placement@{hosts}",
            scheduler,
            f"<= {SCHEDULER_CPU_MS_TARGET}",
            scheduler is not None and scheduler <= SCHEDULER_CPU_MS_TARGET,
        )
        to_scheduled = phases["latency"].get("segments_ms", {}).get("to_scheduled", {}).get("p99")
        judge(
            f"p99_ms_post_to_scheduled_at_{LATENCY_RATE:g}@{hosts}",
            to_scheduled,
            f"< {P99_TO_SCHEDULED_MS_TARGET:g}",
            to_scheduled is not None and to_scheduled < P99_TO_SCHEDULED_MS_TARGET,
        )
        counted = size.get("messages") or {}
        for kind in ("batches_of_100", "single"):
            per_vm = (counted.get(kind) or {}).get("scheduling_path_per_vm")
            judge(
                f"messages_per_vm_{kind}@{hosts}",
                per_vm,
                f"<= {MESSAGES_PER_VM_TARGET:g}",
                per_vm is not None and per_vm <= MESSAGES_PER_VM_TARGET,
            )
    rss = max(max(s["scheduler_peak_rss_mb"]) for s in sizes)
    judge("scheduler_peak_rss_mb", rss, "<= 250", rss <= 250)
    if extra is not None:
        conflicts = extra["fill"]["conflicts_per_placement"] or 0.0
        judge("conflicts_per_placement_at_80pct", conflicts, "<= 0.01", conflicts <= 0.01)
        pack = extra["packing"]
        judge(
            "best_fit_over_bound",
            pack["best_fit_over_bound"],
            "<= 1.10 and fewer hosts than least_loaded",
            pack["best_fit_over_bound"] <= 1.10 and pack["best_fit_hosts"] < pack["least_loaded_hosts"],
        )
    return out


def print_table(result: dict[str, Any]) -> None:
    print()
    header = ("hosts", "phase", "offered/s", "batch", "achieved/s", "p50 ms", "p95 ms", "p99 ms")
    print("{:>6} {:<14} {:>9} {:>5} {:>10} {:>8} {:>8} {:>8}".format(*header))
    for size in result["fleets"]:
        for name, p in size["phases"].items():
            offered = "max" if p["offered_per_s"] is None else f"{p['offered_per_s']:g}"
            print(
                f"{size['hosts']:>6} {name:<14} {offered:>9} {p['batch']:>5} {p['achieved_per_s']:>10.0f} "
                f"{p['p50_ms']:>8.1f} {p['p95_ms']:>8.1f} {p['p99_ms']:>8.1f}"
            )
        for name, p in size["phases"].items():
            if p.get("segments_ms"):
                legs = ", ".join(f"{leg} {v['p50']:.0f}/{v['p99']:.0f}" for leg, v in p["segments_ms"].items())
                print(f"{size['hosts']:>6} {name} legs p50/p99 ms: {legs}")
        if size.get("idle_cores_busy"):
            idle = ", ".join(f"{name} {cores:.3f}" for name, cores in size["idle_cores_busy"].items())
            print(f"{size['hosts']:>6} cores busy with nothing placed: {idle}")
        cpu = size["phases"]["saturation"].get("cpu_ms_per_vm")
        if cpu:
            spent = ", ".join(f"{name} {ms:.2f}" for name, ms in cpu.items())
            print(f"{size['hosts']:>6} CPU ms per placement at saturation: {spent}")
        for kind, counted in (size.get("messages") or {}).items():
            keys = ", ".join(f"{k} {v['messages']}" for k, v in counted["by_routing_key"].items())
            print(
                f"{size['hosts']:>6} messages per VM ({kind}): scheduling path {counted['scheduling_path_per_vm']}, "
                f"all {counted['all_per_vm']} ({counted['vms']} VMs: {keys})"
            )
        if size.get("broker_ceiling"):
            ceiling = size["broker_ceiling"]
            print(
                f"{size['hosts']:>6} broker floor: {ceiling['broker_us_per_vm']} us of RabbitMQ CPU per VM, ceiling "
                f"{ceiling['ceiling_per_s']}/s, achieved {ceiling['achieved_over_ceiling']:.0%} of it"
            )
        print(
            f"{size['hosts']:>6} decision p50/p99 {size['decision_p50_us']}/{size['decision_p99_us']} us, "
            f"conflicts/placement {size['conflicts_per_placement']}, "
            f"scheduler peak RSS {size['scheduler_peak_rss_mb']} MB"
        )
    if result.get("contention_and_packing"):
        extra = result["contention_and_packing"]
        print(f"fill to 80%: {extra['fill']}")
        print(f"packing: {extra['packing']}")
    print()
    for name, verdict in result["targets"].items():
        print(f"{'MET ' if verdict['met'] else 'MISS'} {name}: {verdict['value']} (target {verdict['target']})")
