"""Rebalance benchmark: one plan (``spread`` and ``pack``) over a large, skewed, seeded fleet.

    python bench/rebalance_bench.py [--hosts 10000] [--vms 100000] [--runs 3] [--max-moves 50] [--out x.json]

Target (issue 15): a plan over 10,000 hosts and 100,000 VMs in at most 5 seconds. Single-threaded,
pinned to one CPU where the OS allows. Each run rebuilds the fleet (untimed; the API builds it from
the snapshot), then times ``plan_rebalance`` alone. Every host can migrate; a tenth of the VMs are in
one of 100 server groups (anti-affinity per host or per zone), so every rule the planner checks is
live. A fifth of the hosts are hot (VMs piled on them): spread has work to do; the hosts' VM counts
vary from 1 to 19: pack has hosts to empty.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import numpy as np

from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_contract.rebalance import Goal
from vmsched_contract.strategy import Strategy
from vmsched_domain.groups import GroupRule
from vmsched_placement import DecisionContext, Demand, Fleet, HostState, PlacementRequest, Weights
from vmsched_placement.rebalance import MovableVm, plan_rebalance

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.placement_bench import git_commit, pin_to_one_cpu  # noqa: E402

NOW = 1_800_000_000.0
BUDGET_S = 5.0
GROUPS = 100
SHAPES = [Demand(1, 2048, 20), Demand(2, 4096, 40), Demand(4, 8192, 80), Demand(8, 16384, 160)]


def build(hosts: int, vms: int, seed: int) -> tuple[list[HostState], list[MovableVm]]:
    rng = random.Random(seed)
    rules = [
        GroupRule(UUID(int=index + 1), GroupPolicy.ANTI_AFFINITY, HOST_TOPOLOGY if index % 2 else "zone", 2 + index % 3)
        for index in range(GROUPS)
    ]
    ids = [f"hv-{index:05d}" for index in range(hosts)]
    hot = sorted(rng.sample(ids, hosts // 5))
    placed: list[MovableVm] = []
    used = {host_id: Demand(0, 0, 0) for host_id in ids}
    counts = dict.fromkeys(ids, 0)
    capacity = Demand(128, 524288, 8000)
    index = 0
    while len(placed) < vms:
        index += 1
        host_id = rng.choice(hot) if rng.random() < 0.4 and hot else rng.choice(ids)
        shape = rng.choice(SHAPES)
        after = used[host_id].plus(shape)
        if after.cpu > capacity.cpu or after.memory_mb > capacity.memory_mb or after.disk_gb > capacity.disk_gb:
            continue
        used[host_id], counts[host_id] = after, counts[host_id] + 1
        group = rng.choice(rules) if rng.random() < 0.1 else None
        request = PlacementRequest(
            vm_id=str(UUID(int=index)), name=f"vm-{index}", demand=shape, labels={}, strategy=Strategy.LEAST_UTILIZED
        )
        placed.append(MovableVm(request, host_id, group))
    states = [
        HostState(
            id=host_id,
            status="online",
            labels={"zone": f"z{position % 10}", "rack": f"r{position % 200}"},
            capacity=capacity,
            allocated=used[host_id],
            vm_count=counts[host_id],
            scheduling_paused=False,
            last_heartbeat=NOW - 1,
            can_migrate=True,
        )
        for position, host_id in enumerate(ids)
    ]
    return states, placed


def context(seed: int) -> DecisionContext:
    return DecisionContext(now=NOW, offline_timeout=15.0, weights=Weights(), rng=random.Random(seed))


def time_goal(
    hosts: list[HostState], vms: list[MovableVm], goal: Goal, runs: int, max_moves: int, seed: int
) -> dict[str, object]:
    seconds: list[float] = []
    moves = 0
    before = after = 0.0
    for _ in range(runs):
        fleet = Fleet.from_hosts(hosts)
        started = time.perf_counter()
        plan = plan_rebalance(fleet, vms, goal, context(seed), max_moves=max_moves)
        seconds.append(time.perf_counter() - started)
        moves, before, after = len(plan.moves), plan.score_before, plan.score_after
    return {
        "median_s": statistics.median(seconds),
        "max_s": max(seconds),
        "moves": moves,
        "score_before": before,
        "score_after": after,
        "within_budget": max(seconds) <= BUDGET_S,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--vms", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-moves", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20261126)
    parser.add_argument("--out", type=Path, default=None, help="JSON report path")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if a plan takes more than {BUDGET_S:g} s")
    args = parser.parse_args()

    cpu = pin_to_one_cpu()
    hosts, vms = build(args.hosts, args.vms, args.seed)
    results = {goal.value: time_goal(hosts, vms, goal, args.runs, args.max_moves, args.seed) for goal in Goal}

    print(f"rebalance: {args.hosts} hosts, {len(vms)} VMs, max {args.max_moves} moves, {args.runs} runs, cpu {cpu}")
    print(f"{'goal':<8}{'median s':>10}{'max s':>8}{'moves':>7}{'before':>10}{'after':>10}  budget {BUDGET_S:g} s")
    for name, result in results.items():
        print(
            f"{name:<8}{result['median_s']:>10.2f}{result['max_s']:>8.2f}{result['moves']:>7}"
            f"{result['score_before']:>10.4f}{result['score_after']:>10.4f}"
            f"  {'ok' if result['within_budget'] else 'OVER'}"
        )

    out = args.out or Path(__file__).parent / "results" / f"rebalance-{datetime.now(UTC):%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "rebalance",
        "recorded_at": datetime.now(UTC).isoformat(),
        "git_commit": git_commit(),
        "settings": {
            "hosts": args.hosts,
            "vms": len(vms),
            "runs": args.runs,
            "max_moves": args.max_moves,
            "seed": args.seed,
            "budget_s": BUDGET_S,
            "pinned_cpu": cpu,
        },
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": sys.version,
            "numpy": np.__version__,
        },
        "goals": results,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {out}")
    over = [name for name, result in results.items() if not result["within_budget"]]
    return 1 if args.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
