"""What the services recorded of a phase in PostgreSQL: each placement's decision time and claim
conflicts, and where a request's time went."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from bench.e2e.fleets import Fleet
from bench.e2e.load import Phase
from bench.e2e_stats import percentile


async def placement_costs(database_url: str, vm_ids: Sequence[str]) -> dict[str, Any]:
    dsn = database_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT (placement->>'decision_us')::float AS us, (placement->>'claim_conflicts')::int AS conflicts "
            "FROM vms WHERE id = ANY($1::uuid[]) AND placement ? 'decision_us'",
            list(vm_ids),
        )
    finally:
        await conn.close()
    decisions = [row["us"] for row in rows]
    conflicts = sum(row["conflicts"] or 0 for row in rows)
    return {
        "placements": len(rows),
        "decision_p50_us": round(percentile(decisions, 50), 1),
        "decision_p99_us": round(percentile(decisions, 99), 1),
        "claim_conflicts": conflicts,
        "conflicts_per_placement": round(conflicts / len(rows), 5) if rows else None,
    }


async def latency_segments(database_url: str, phase: Phase, fleets: Sequence[Fleet]) -> dict[str, dict[str, float]]:
    """Where a request's time goes, p50 and p99 of each leg (one machine, one clock): ``api``,
    request due to VM row committed (``created_at``); ``scheduler``, to its placement committed
    (``scheduled_at``); ``relay``, to the agent taking the command (vm.assigned, the gateway, the
    agent's queue)."""
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        rows = await conn.fetch(
            "SELECT id::text AS id, extract(epoch FROM created_at) AS created, "
            "extract(epoch FROM scheduled_at) AS scheduled FROM vms WHERE id = ANY($1::uuid[])",
            list(phase.sent),
        )
    finally:
        await conn.close()
    received = {vm: at for f in fleets for vm, at in f.receipts.items() if vm in phase.sent}
    legs: dict[str, list[float]] = {"api": [], "scheduler": [], "relay": [], "to_scheduled": []}
    for row in rows:
        if row["scheduled"] is None or row["id"] not in received:
            continue
        created, scheduled = float(row["created"]), float(row["scheduled"])
        legs["api"].append((created - phase.sent[row["id"]]) * 1000)
        legs["scheduler"].append((scheduled - created) * 1000)
        legs["relay"].append((received[row["id"]] - scheduled) * 1000)
        legs["to_scheduled"].append((scheduled - phase.sent[row["id"]]) * 1000)
    return {leg: {"p50": round(percentile(v, 50), 1), "p99": round(percentile(v, 99), 1)} for leg, v in legs.items()}
