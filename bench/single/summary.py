"""The medians of the runs beside each target, saved and printed last."""

from __future__ import annotations

from typing import Any

from bench.e2e_stats import median
from bench.single.plan import TARGETS


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of each figure a target names, with the target and its verdict."""

    def med(path: str) -> float | None:
        values = []
        for run in runs:
            value: Any = run
            for key in path.split("."):
                if key not in value or value[key] is None:
                    return None
                value = value[key]
            values.append(float(value))
        return round(median(values), 3)

    def ratio(part: float | None, whole: float | None) -> float | None:
        return None if part is None or not whole else round(part / whole, 3)

    hop = med("hop_per_s")
    figures: dict[str, tuple[float | None, float | None, str | None]]
    figures = {
        "hop_per_s": (hop, None, None),
        "lone_p50_ms": (med("lone.p50_ms"), TARGETS["lone_p50_ms"], "<="),
        "lone_p99_ms": (med("lone.p99_ms"), TARGETS["lone_p99_ms"], "<="),
        "clients32_per_s": (med("clients32.per_s"), TARGETS["clients32_per_s"], ">="),
        "clients32_hop_ratio": (ratio(med("clients32.per_s"), hop), TARGETS["clients32_hop_ratio"], ">="),
        "clients32_p50_ms": (med("clients32.p50_ms"), None, None),
        "clients32_p99_ms": (med("clients32.p99_ms"), None, None),
        "open100_p99_ms": (med("open100.to_agent_p99_ms"), TARGETS["open100_p99_ms"], "<="),
        "open300_p99_ms": (med("open300.to_agent_p99_ms"), TARGETS["open300_p99_ms"], "<="),
        "batch_per_s": (med("batch.placements_per_s"), None, None),
        "batch_ceiling_ratio": (med("batch.ceiling_ratio"), TARGETS["batch_ceiling_ratio"], ">="),
        "batch_cpu_ms": (med("batch.cpu_ms_per_vm.total"), TARGETS["batch_cpu_ms"], "<="),
        "singles_cpu_ms": (med("clients32.cpu_ms_per_vm.total"), TARGETS["singles_cpu_ms"], "<="),
    }
    out = {}
    for name, (value, target, sense) in figures.items():
        if value is None:
            continue
        met = None if target is None else (value <= target if sense == "<=" else value >= target)
        out[name] = {"median": value, "target": target, "sense": sense, "met": met}
    return out


def print_summary(result: dict[str, Any]) -> None:
    print(f"\nmedians of {len(result['runs'])} runs, {result['hosts']} hosts ({result['commit']}):")
    for name, row in result["summary"].items():
        target = "" if row["target"] is None else f"  target {row['sense']} {row['target']:g}"
        verdict = "" if row["met"] is None else ("  met" if row["met"] else "  MISSED")
        print(f"  {name:22} {row['median']:>10g}{target}{verdict}")
