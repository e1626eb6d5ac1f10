"""A run: each phase (hop, lone, clients32, open100, open300, batch) on one stack and its fleet."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg

from bench.cpu_account import cpu_times, per_vm_ms, spent
from bench.e2e.fleets import Fleet
from bench.e2e.load import wait_received
from bench.e2e.processes import component_pids, profiled
from bench.e2e_stats import percentile, sustained_rate
from bench.single.api_phases import phase_breakdown, scrape_phases
from bench.single.broker_hop import raw_hop
from bench.single.load import Load, batches_flat_out, closed_loop, open_loop
from bench.single.plan import BATCH_VMS, CLIENTS
from devtools.stack import Stack


def ms(values: Sequence[float], q: float) -> float:
    return round(percentile(values, q), 2)


def to_agent_ms(fleets: Sequence[Fleet], sent: dict[str, float]) -> list[float]:
    received = {vm: at for f in fleets for vm, at in f.receipts.items() if vm in sent}
    return [(received[vm] - at) * 1000 for vm, at in sent.items() if vm in received]


async def legs(database_url: str, fleets: Sequence[Fleet], sent: dict[str, float]) -> dict[str, dict[str, float]]:
    """Where the way to the agent goes, p50 and p99 ms of each leg (one machine, one clock): ``api``,
    request due to its VM row committed (``created_at``: the transaction's start); ``scheduler``, to
    the placement committed (``scheduled_at``); ``relay``, to the agent taking the command."""
    connection = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        rows = await connection.fetch(
            "SELECT id::text AS id, extract(epoch FROM created_at) AS created, "
            "extract(epoch FROM scheduled_at) AS scheduled FROM vms WHERE id = ANY($1::uuid[])",
            list(sent),
        )
    finally:
        await connection.close()
    received = {vm: at for f in fleets for vm, at in f.receipts.items() if vm in sent}
    found: dict[str, list[float]] = {"api": [], "scheduler": [], "relay": []}
    for row in rows:
        if row["scheduled"] is None or row["id"] not in received:
            continue
        created, scheduled = float(row["created"]), float(row["scheduled"])
        found["api"].append((created - sent[row["id"]]) * 1000)
        found["scheduler"].append((scheduled - created) * 1000)
        found["relay"].append((received[row["id"]] - scheduled) * 1000)
    return {leg: {"p50": ms(values, 50), "p99": ms(values, 99)} for leg, values in found.items()}


async def settle(fleets: Sequence[Fleet], sent: dict[str, float]) -> int:
    return await asyncio.to_thread(wait_received, fleets, sent)


PHASES = ("hop", "lone", "clients32", "open100", "open300", "batch")


async def one_run(
    stack: Stack, fleets: list[Fleet], seconds: float, label: str, phases: Sequence[str] = PHASES
) -> dict[str, Any]:
    load = Load(stack)
    run: dict[str, Any] = {}

    if "hop" in phases:
        run["hop_per_s"] = round(await raw_hop(stack.env["VMSCHED_AMQP_URL"]), 1)
        print(f"  hop: {run['hop_per_s']} messages/s", flush=True)

    if "lone" in phases:
        run["lone"] = await lone(stack, fleets, load, seconds)
        print(f"  lone: {run['lone']}", flush=True)
    if "clients32" in phases:
        run["clients32"] = await clients32(stack, fleets, load, seconds, label)
        print(f"  clients32: {run['clients32']}", flush=True)
    for rate in (100.0, 300.0):
        key = f"open{rate:g}"
        if key in phases:
            run[key] = await open_phase(stack, fleets, load, rate, seconds)
            print(f"  {key}: {run[key]}", flush=True)
    if "batch" in phases:
        run["batch"] = await batch_phase(stack, fleets, load, label, run.get("hop_per_s"))
        print(f"  batch: {run['batch']}", flush=True)
    return run


async def lone(stack: Stack, fleets: list[Fleet], load: Load, seconds: float) -> dict[str, Any]:
    before = scrape_phases(stack.api_url)
    sent, latencies, wall = await closed_loop(load, 1, seconds)
    missing = await settle(fleets, sent)
    return {
        "posts": len(sent),
        "per_s": round(len(sent) / wall, 1),
        "p50_ms": ms(latencies, 50),
        "p99_ms": ms(latencies, 99),
        "to_agent_p50_ms": ms(to_agent_ms(fleets, sent), 50),
        "to_agent_p99_ms": ms(to_agent_ms(fleets, sent), 99),
        "missing": missing,
        "phases": phase_breakdown(before, scrape_phases(stack.api_url)),
        "legs_ms": await legs(stack.env["VMSCHED_DATABASE_URL"], fleets, sent),
    }


async def clients32(stack: Stack, fleets: list[Fleet], load: Load, seconds: float, label: str) -> dict[str, Any]:
    named = component_pids(stack, fleets)
    before = scrape_phases(stack.api_url)
    cpu_before = cpu_times(named)
    with profiled(stack, fleets, f"{label}-clients32"):
        sent, latencies, wall = await closed_loop(load, CLIENTS, seconds)
        missing = await settle(fleets, sent)
    cpu = spent(cpu_before, cpu_times(named))
    received = [at for f in fleets for vm, at in f.receipts.items() if vm in sent]
    return {
        "posts": len(sent),
        "per_s": round(len(sent) / wall, 1),
        "p50_ms": ms(latencies, 50),
        "p99_ms": ms(latencies, 99),
        "placements_per_s": round(sustained_rate(received), 1),
        "missing": missing,
        "cpu_ms_per_vm": per_vm_ms(cpu, len(sent) - missing),
        "phases": phase_breakdown(before, scrape_phases(stack.api_url)),
    }


async def open_phase(stack: Stack, fleets: list[Fleet], load: Load, rate: float, seconds: float) -> dict[str, Any]:
    sent, latencies, wall = await open_loop(load, rate, max(seconds, 15.0))
    missing = await settle(fleets, sent)
    to_agent = to_agent_ms(fleets, sent)
    return {
        "posts": len(sent),
        "offered_per_s": rate,
        "accepted_per_s": round(len(sent) / wall, 1),
        "response_p50_ms": ms(latencies, 50),
        "response_p99_ms": ms(latencies, 99),
        "to_agent_p50_ms": ms(to_agent, 50),
        "to_agent_p99_ms": ms(to_agent, 99),
        "missing": missing,
        "legs_ms": await legs(stack.env["VMSCHED_DATABASE_URL"], fleets, sent),
    }


async def batch_phase(stack: Stack, fleets: list[Fleet], load: Load, label: str, hop: float | None) -> dict[str, Any]:
    named = component_pids(stack, fleets)
    cpu_before = cpu_times(named)
    with profiled(stack, fleets, f"{label}-batch"):
        sent, wall = await batches_flat_out(load, BATCH_VMS)
        missing = await settle(fleets, sent)
    cpu = spent(cpu_before, cpu_times(named))
    received = [at for f in fleets for vm, at in f.receipts.items() if vm in sent]
    placements = sustained_rate(received)
    return {
        "vms": len(sent),
        "accepted_per_s": round(len(sent) / wall, 1),
        "placements_per_s": round(placements, 1),
        "ceiling_per_s": None if hop is None else round(hop / 3, 1),
        "ceiling_ratio": None if hop is None else round(placements / (hop / 3), 3),
        "missing": missing,
        "cpu_ms_per_vm": per_vm_ms(cpu, len(sent) - missing),
    }
