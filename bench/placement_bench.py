"""Placement engine benchmark: per-decision time of every strategy over a large seeded fleet.

    python bench/placement_bench.py [--hosts 10000] [--runs 5] [--repeat 2000] [--out bench/results/x.json]

Single-threaded, pinned to one CPU where the OS allows. Each run rebuilds the fleet, then times
``decide`` once per request (perf_counter_ns around the call only) and books the VM on the chosen
host as the scheduler does (untimed). Reported per strategy: the median of the run medians, p99 over
all decisions, and decisions/s (decisions / summed decision time, median over runs). Also measured,
for information: ``Fleet.upsert`` of one known host, of one new host, and ``explain`` for one VM.

Every host reaches some networks (a few of eight VLANs, drawn apart so that the rest of the fleet
stays what it was) and sits in one of 40 pods and 10 clusters; half the requests ask for one or two
networks, so every row pays the ``network`` filter. ``user_concentrated`` requests carry their
project's VMs in a few pods.

The row ``least_loaded+groups`` is ``least_loaded`` with 1,000 server groups live (every policy, keyed
on hosts, zones and racks, with members across the fleet) and every VM a member of one of them: every
rule active. Its time is ``decide``'s; building the group's view (a copy of its members per domain)
is in it too, as the round does it per decision.

The row ``least_loaded+groups+pools`` is that row on a fleet with storage pools (issue 26): every host
a local pool, and each zone's hosts reaching two of eight shared pools; 80 % of the VMs ask one or two
volumes (tagged or not), placed first fit and booked on the fleet (a shared pool once for all hosts).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import SelectorOperator
from vmsched_contract.strategy import Strategy
from vmsched_domain.groups import GroupRule, domain_of
from vmsched_domain.storage import PoolRoom, VolumeAsk, per_pool
from vmsched_domain.usage import MeasuredUsage
from vmsched_placement import (
    DecisionContext,
    Demand,
    Fleet,
    HostState,
    PlacementRequest,
    SelectorTerm,
    Weights,
    decide,
    explain,
)
from vmsched_placement.model import PlacementGroup

NOW = 1_800_000_000.0
OFFLINE_TIMEOUT = 15.0
BUDGET_US = 200.0
GROUPS = 1000
# (policy, topology key, share of the groups)
GROUP_KINDS = [
    (GroupPolicy.ANTI_AFFINITY, "host", 40),
    (GroupPolicy.SPREAD, "zone", 20),
    (GroupPolicy.AFFINITY, "rack", 10),
    (GroupPolicy.SOFT_ANTI_AFFINITY, "host", 20),
    (GroupPolicy.SOFT_AFFINITY, "zone", 10),
]
ZONES = [f"zone-{n}" for n in range(4)]
NETWORKS = [f"vlan-{100 + n}" for n in range(8)]
PODS = [f"pod-{n:02d}" for n in range(40)]
CLUSTERS = [f"cluster-{n}" for n in range(10)]
RACKS = [f"rack-{n:02d}" for n in range(40)]
HOST_SHAPES = [  # (cpu, memory MiB, disk GB, gpu), with how common each is
    ((16, 65536, 500, 0), 30),
    ((32, 131072, 1000, 0), 35),
    ((64, 262144, 2000, 0), 25),
    ((128, 524288, 4000, 0), 5),
    ((32, 262144, 2000, 4), 5),
]


def build_hosts(count: int, rng: random.Random) -> list[HostState]:
    shapes, weights = zip(*HOST_SHAPES, strict=True)
    hosts = []
    # Measured usage on 80 % of hosts, drawn apart so that the rest of the fleet stays what it was;
    # networks, pods and clusters too.
    measuring = random.Random(f"usage:{count}")
    placing = random.Random(f"networks:{count}")
    for n in range(count):
        cpu, memory_mb, disk_gb, gpu = rng.choices(shapes, weights)[0]
        fill = rng.random() * 0.85
        labels = {"zone": rng.choice(ZONES), "rack": rng.choice(RACKS)}
        if gpu:
            labels["gpu"] = "a100"
        labels.update(pod=placing.choice(PODS), cluster=placing.choice(CLUSTERS))
        hosts.append(
            HostState(
                id=f"hv-{n:05d}",
                status=rng.choices(["online", "draining", "offline"], [94, 3, 3])[0],
                labels=labels,
                capacity=Demand(cpu, memory_mb, disk_gb, gpu),
                allocated=Demand(int(cpu * fill), int(memory_mb * fill), int(disk_gb * fill * 0.7), 0),
                vm_count=int(cpu * fill / 2),
                scheduling_paused=rng.random() < 0.02,
                last_heartbeat=NOW - (rng.random() * 10 if rng.random() < 0.97 else 30 + rng.random() * 100),
                cpu_ratio=rng.choice([1.0, 1.0, 2.0, 4.0]),
                memory_ratio=rng.choice([1.0, 1.0, 1.5]),
                usage=measured_usage(cpu, memory_mb, fill, measuring),
                networks=frozenset(placing.sample(NETWORKS, placing.randint(2, 5))),
            )
        )
    return hosts


SHARED_POOLS = 8
POOL_TAGS = ["ssd", "replicated", "fast"]


def with_pools(hosts: list[HostState], rng: random.Random) -> tuple[list[HostState], dict[str, PoolRoom]]:
    """The hosts, each with a local pool and the two shared pools of its zone; the shared pools."""
    shared = {
        f"shared-{n}": PoolRoom(
            f"shared-{n}", True, 2_000_000, rng.randrange(0, 1_000_000), frozenset(POOL_TAGS[: n % 3 + 1])
        )
        for n in range(SHARED_POOLS)
    }
    pooled = []
    for host in hosts:
        zone = ZONES.index(host.labels["zone"])
        local = PoolRoom("local", False, host.capacity.disk_gb, int(host.allocated.disk_gb * 0.5),
                         frozenset(rng.sample(POOL_TAGS, rng.randint(0, 2))))  # fmt: skip
        reach = tuple(PoolRoom(f"shared-{2 * zone + k}", True, 0, 0) for k in range(2))
        pooled.append(replace(host, storage_pools=(local, *reach)))
    return pooled, shared


def volumes_for(rng: random.Random) -> tuple[VolumeAsk, ...]:
    roll = rng.random()
    if roll < 0.2:
        return ()
    count = 1 if roll < 0.7 else 2
    return tuple(
        VolumeAsk(rng.choice([10, 20, 50, 100, 200]), frozenset(rng.sample(POOL_TAGS, rng.randint(0, 1))))
        for _ in range(count)
    )


def measured_usage(cpu: int, memory_mb: int, fill: float, rng: random.Random) -> MeasuredUsage | None:
    if rng.random() >= 0.8:
        return None
    busy = rng.uniform(0.2, 0.9)
    return MeasuredUsage(
        cpu_used=cpu * fill * busy,
        memory_used_mb=float(int(memory_mb * fill * busy)),
        allocated_cpu=int(cpu * fill),
        allocated_memory_mb=int(memory_mb * fill),
    )


def build_requests(count: int, host_count: int, strategy: Strategy, rng: random.Random) -> list[PlacementRequest]:
    requests = []
    asking = random.Random(f"networks:{count}:{strategy.value}")  # apart from ``rng``, as for hosts
    for n in range(count):
        cpu = rng.choice([1, 2, 2, 4, 4, 8, 16])
        labels: dict[str, str] = {}
        roll = rng.random()
        if roll < 0.30:
            labels["zone"] = rng.choice(ZONES)
        elif roll < 0.40:
            labels.update(zone=rng.choice(ZONES), rack=rng.choice(RACKS))
        gpu = 0
        if rng.random() < 0.05:
            gpu = 1
            labels["gpu"] = "a100"
        selector: tuple[SelectorTerm, ...] = ()
        if gpu == 0 and rng.random() < 0.20:
            # Node affinity as people write it: one of some zones, and off the GPU hosts.
            selector = (
                SelectorTerm("zone", SelectorOperator.IN, tuple(rng.sample(ZONES, 2))),
                SelectorTerm("gpu", SelectorOperator.DOES_NOT_EXIST),
            )
        exclude = frozenset(f"hv-{rng.randrange(host_count):05d}" for _ in range(rng.randint(1, 2)))
        requests.append(
            PlacementRequest(
                vm_id=f"vm-{n}",
                name=f"vm-{n}",
                demand=Demand(cpu, cpu * rng.choice([1024, 2048, 4096]), rng.choice([10, 20, 50, 100]), gpu),
                labels=labels,
                strategy=strategy,
                exclude_hosts=exclude if rng.random() < 0.05 else frozenset(),
                host_selector=selector,
                networks=frozenset(asking.sample(NETWORKS, asking.randint(1, 2)))
                if asking.random() < 0.5
                else frozenset(),
                project_pods={pod: asking.randint(1, 9) for pod in asking.sample(PODS, 3)}
                if strategy is Strategy.USER_CONCENTRATED
                else {},
            )
        )
    return requests


def percentile(sorted_values: list[int], share: float) -> float:
    return float(sorted_values[min(len(sorted_values) - 1, int(share * len(sorted_values)))])


def time_strategy(hosts: list[HostState], strategy: Strategy, runs: int, repeat: int, seed: int) -> dict[str, Any]:
    medians, throughputs, every = [], [], []
    eligible, unschedulable = [], 0
    for run in range(runs):
        rng = random.Random(seed * 1000 + run)
        fleet = Fleet.from_hosts(hosts)
        requests = build_requests(repeat, len(hosts), strategy, rng)
        base = DecisionContext(NOW, OFFLINE_TIMEOUT, Weights(), random.Random(run), 0)
        timings = []
        gc.collect()
        for cursor, request in enumerate(requests):
            context = replace(base, round_robin_cursor=cursor)
            started = time.perf_counter_ns()
            decision = decide(fleet, request, context)
            timings.append(time.perf_counter_ns() - started)
            if decision.host_id is None:
                unschedulable += 1
            else:
                fleet.allocate(decision.host_id, request.demand)
            eligible.append(decision.eligible)
        medians.append(statistics.median(timings) / 1000)
        throughputs.append(len(timings) / (sum(timings) / 1e9))
        every.extend(timings)
    every.sort()
    return {
        "median_us": statistics.median(medians),
        "run_medians_us": [round(m, 2) for m in medians],
        "p99_us": percentile(every, 0.99) / 1000,
        "decisions_per_s": statistics.median(throughputs),
        "decisions": len(every),
        "unschedulable": unschedulable,
        "mean_eligible_hosts": statistics.fmean(eligible),
    }


def build_groups(hosts: list[HostState], rng: random.Random) -> tuple[list[GroupRule], list[dict[str, int]]]:
    """1,000 groups of every kind, each with 0 to 20 members on random online hosts."""
    kinds, weights = zip(*[((policy, key), share) for policy, key, share in GROUP_KINDS], strict=True)
    rules, members = [], []
    for n in range(GROUPS):
        policy, key = rng.choices(kinds, weights)[0]
        rules.append(GroupRule(uuid.UUID(int=n), policy, key, max_per_domain=rng.choice([1, 1, 2]), max_skew=1))
        counted: dict[str, int] = {}
        for _ in range(rng.randint(0, 20)):
            host = rng.choice(hosts)
            domain = domain_of(key, host.id, host.labels)
            if domain is not None:
                counted[domain] = counted.get(domain, 0) + 1
        members.append(counted)
    return rules, members


def time_groups(
    hosts: list[HostState], runs: int, repeat: int, seed: int, pools: dict[str, PoolRoom] | None = None
) -> dict[str, Any]:
    """``least_loaded`` with every VM a member of one of 1,000 live groups, booked as the round books;
    with ``pools`` (the shared pools of ``hosts``' storage), most VMs ask volumes too."""
    medians, throughputs, every = [], [], []
    eligible, unschedulable = [], 0
    for run in range(runs):
        rng = random.Random(seed * 1000 + run)
        fleet = Fleet.from_hosts(hosts)
        rules, members = build_groups(hosts, random.Random(seed + run))
        requests = build_requests(repeat, len(hosts), Strategy.LEAST_LOADED, rng)
        if pools is not None:
            fleet.set_shared_pools(pools)
            requests = [replace(request, volumes=volumes_for(rng)) for request in requests]
        joins = [rng.randrange(GROUPS) for _ in requests]
        context = DecisionContext(NOW, OFFLINE_TIMEOUT, Weights(), random.Random(run), 0)
        timings = []
        gc.collect()
        for request, index in zip(requests, joins, strict=True):
            started = time.perf_counter_ns()
            grouped = replace(request, group=PlacementGroup(rules[index], dict(members[index])))
            decision = decide(fleet, grouped, context)
            timings.append(time.perf_counter_ns() - started)
            if decision.host_id is None:
                unschedulable += 1
                continue
            fleet.allocate(decision.host_id, request.demand, per_pool(request.volumes, decision.volumes))
            host = fleet.host(decision.host_id)
            assert host is not None
            domain = domain_of(rules[index].topology_key, host.id, host.labels)
            if domain is not None:
                members[index][domain] = members[index].get(domain, 0) + 1
            eligible.append(decision.eligible)
        medians.append(statistics.median(timings) / 1000)
        throughputs.append(len(timings) / (sum(timings) / 1e9))
        every.extend(timings)
    every.sort()
    return {
        "median_us": statistics.median(medians),
        "run_medians_us": [round(m, 2) for m in medians],
        "p99_us": percentile(every, 0.99) / 1000,
        "decisions_per_s": statistics.median(throughputs),
        "decisions": len(every),
        "unschedulable": unschedulable,
        "mean_eligible_hosts": statistics.fmean(eligible) if eligible else 0.0,
        "groups": GROUPS,
    }


def time_calls(call: Callable[[], object], count: int) -> dict[str, float]:
    timings = []
    for _ in range(count):
        started = time.perf_counter_ns()
        call()
        timings.append(time.perf_counter_ns() - started)
    timings.sort()
    return {"median_us": statistics.median(timings) / 1000, "p99_us": percentile(timings, 0.99) / 1000}


def informational(hosts: list[HostState], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    started = time.perf_counter_ns()
    fleet = Fleet.from_hosts(hosts)
    build_ms = (time.perf_counter_ns() - started) / 1e6
    fleet.columns.label_mask("zone", ZONES[0])  # a cached label mask, as in a running scheduler
    known = [hosts[rng.randrange(len(hosts))] for _ in range(2000)]
    updates = iter([replace(h, last_heartbeat=NOW + 1.0) for h in known])
    upsert_known = time_calls(lambda: fleet.upsert(next(updates)), len(known))

    newcomer = replace(hosts[len(hosts) // 2], id=f"hv-{len(hosts) // 2:05d}a")

    def add_and_remove() -> None:
        fleet.upsert(newcomer)
        fleet.remove(newcomer.id)

    upsert_new = time_calls(add_and_remove, 300)
    request = build_requests(1, len(hosts), Strategy.LEAST_LOADED, rng)[0]
    context = DecisionContext(NOW, OFFLINE_TIMEOUT, Weights(), random.Random(0), 0)
    explain_one = time_calls(lambda: explain(fleet, request, context), 10)
    return {
        "fleet_from_hosts_ms": build_ms,
        "upsert_known_host": upsert_known,
        "upsert_new_host_plus_remove": upsert_new,
        "explain_one_vm": {key: value / 1000 for key, value in explain_one.items()} | {"unit": "ms"},
    }


def pin_to_one_cpu() -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=2000, help="decisions per run")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--out", type=Path, default=None, help="JSON report path")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if a strategy's median exceeds {BUDGET_US:g} us")
    args = parser.parse_args()

    cpu = pin_to_one_cpu()
    hosts = build_hosts(args.hosts, random.Random(args.seed))
    results = {
        strategy.value: time_strategy(hosts, strategy, args.runs, args.repeat, args.seed) for strategy in Strategy
    }
    results["least_loaded+groups"] = time_groups(hosts, args.runs, args.repeat, args.seed)
    pooled, shared = with_pools(hosts, random.Random(args.seed))
    results["least_loaded+groups+pools"] = time_groups(pooled, args.runs, args.repeat, args.seed, shared)
    extra = informational(hosts, args.seed)

    print(f"placement: {args.hosts} hosts, {args.runs} runs x {args.repeat} decisions, pinned to cpu {cpu}")
    print(f"{'strategy':<26}{'median us':>11}{'p99 us':>10}{'decisions/s':>13}{'eligible':>10}  budget")
    over = []
    for name, result in results.items():
        ok = result["median_us"] <= BUDGET_US
        if not ok:
            over.append(name)
        print(
            f"{name:<26}{result['median_us']:>11.1f}{result['p99_us']:>10.1f}{result['decisions_per_s']:>13,.0f}"
            f"{result['mean_eligible_hosts']:>10.0f}  {'ok' if ok else 'OVER'}"
        )
    print(
        f"Fleet.from_hosts {extra['fleet_from_hosts_ms']:.1f} ms; upsert known host "
        f"{extra['upsert_known_host']['median_us']:.1f} us; upsert+remove new host "
        f"{extra['upsert_new_host_plus_remove']['median_us']:.1f} us; explain one VM "
        f"{extra['explain_one_vm']['median_us']:.1f} ms"
    )

    out = args.out or Path(__file__).parent / "results" / f"placement-{datetime.now(UTC):%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "placement",
        "recorded_at": datetime.now(UTC).isoformat(),
        "git_commit": git_commit(),
        "settings": {
            "hosts": args.hosts,
            "runs": args.runs,
            "decisions_per_run": args.repeat,
            "seed": args.seed,
            "budget_median_us": BUDGET_US,
            "pinned_cpu": cpu,
        },
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "python": sys.version,
            "implementation": platform.python_implementation(),
            "numpy": np.__version__,
        },
        "strategies": results,
        "informational": extra,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 1 if args.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
