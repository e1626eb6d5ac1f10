"""The core of the benchmark, per fleet size on one stack: latency at a fixed rate, the sweep of
batch rates, saturation (with CPU per placement per component), and messages per VM."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvloop

from bench.cpu_account import cpu_times, per_vm_ms, spent
from bench.e2e.fleets import Fleet, stack_with_fleets
from bench.e2e.isolation import isolated
from bench.e2e.load import Phase, Senders, flat_out, paced, summarise, wait_received
from bench.e2e.messages import messages_per_vm
from bench.e2e.plan import LATENCY_RATE, SATURATED, SCHEDULERS, THROUGHPUT_OVERCOMMIT_CPU, WARM_UP_SECONDS, Plan
from bench.e2e.processes import component_pids, idle_cores, mean_batch_sizes, peak_rss_mb, profiled
from bench.e2e.recorded import latency_segments, placement_costs
from bench.e2e_fleet import UNIFORM_CAPACITY
from devtools.stack import Stack
from vmsched_agent import generate_hosts


async def load_runs(stack: Stack, fleets: list[Fleet], plan: Plan, host_ids: Sequence[str]) -> list[dict[str, Any]]:
    runs = []
    senders = Senders(stack)
    try:
        # Not measured: the first seconds after the services start fill their connection pools and
        # caches (the first second's p99 is two to three times the steady one).
        warm_up = Phase("warm-up", LATENCY_RATE, 1)
        await paced(senders, warm_up, LATENCY_RATE, WARM_UP_SECONDS, 1)
        wait_received(fleets, warm_up.sent)
        for run in range(plan.runs):
            phases: list[dict[str, Any]] = []
            latency = Phase("latency", LATENCY_RATE, 1)
            await paced(senders, latency, LATENCY_RATE, plan.latency_seconds, 1)
            phases.append(summarise(latency, fleets, wait_received(fleets, latency.sent)))
            phases[-1]["segments_ms"] = await latency_segments(stack.env["VMSCHED_DATABASE_URL"], latency, fleets)
            for rate in plan.sweep_rates:
                batch = max(1, min(1000, int(rate / 10)))
                step = Phase(f"batch@{rate:g}", rate, batch)
                await paced(senders, step, rate, plan.step_seconds, batch)
                phases.append(summarise(step, fleets, wait_received(fleets, step.sent)))
                if phases[-1]["achieved_per_s"] < SATURATED * rate:
                    break  # saturated: a higher offered rate only grows the backlog (saturation measures it)
            saturation = Phase("saturation", None, 500)
            named = component_pids(stack, fleets)
            cpu_before, wall_before = cpu_times(named), time.monotonic()
            with profiled(stack, fleets, f"h{fleets[0].count}-run{run + 1}"):
                await flat_out(senders, saturation, plan.saturation_vms, 500)
                missing = wait_received(fleets, saturation.sent)
            cpu = spent(cpu_before, cpu_times(named))
            wall = time.monotonic() - wall_before
            summary = summarise(saturation, fleets, missing)
            summary["cpu_ms_per_vm"] = per_vm_ms(cpu, len(saturation.sent) - missing)
            summary["cores_busy"] = round(sum(cpu.values()) / wall, 2)
            summary["mean_batch"] = mean_batch_sizes(stack)
            phases.append(summary)
            for p in phases:
                print(f"  run {run + 1}: {p}", flush=True)
            entry: dict[str, Any] = {"phases": phases}
            if run == 0:  # the same every run: counted once
                entry["messages"] = await messages_per_vm(stack, senders, fleets, host_ids)
                print(f"  messages: {entry['messages']}", flush=True)
            runs.append(entry)
    finally:
        await senders.aclose()
    return runs


def fleet_size_run(plan: Plan, hosts: int, workdir: Path) -> dict[str, Any]:
    print(f"== {hosts} hosts", flush=True)
    with (
        isolated() as iso,
        stack_with_fleets(iso, workdir, [("bench", hosts, "mixed", "", THROUGHPUT_OVERCOMMIT_CPU)]) as (
            stack,
            fleets,
            startup,
        ),
    ):
        print(f"  fleet of {hosts} ready in {startup:.1f} s", flush=True)
        idle = idle_cores(stack, fleets)
        print(f"  cores busy with nothing placed: {idle}", flush=True)
        host_ids = [host.id for host in generate_hosts(hosts, prefix="bench", capacity=UNIFORM_CAPACITY)]
        runs = uvloop.run(load_runs(stack, fleets, plan, host_ids))
        vm_ids = list(fleets[0].receipts)
        costs = asyncio.run(placement_costs(iso.env["VMSCHED_DATABASE_URL"], vm_ids))
        rss = [peak_rss_mb(stack.services[f"scheduler-{i}"].pid) for i in range(1, SCHEDULERS + 1)]
    return {
        "hosts": hosts,
        "fleet_startup_s": round(startup, 1),
        "idle_cores_busy": idle,
        "runs": runs,
        "messages": runs[0].get("messages") if runs else None,
        **costs,
        "scheduler_peak_rss_mb": rss,
    }
