"""Decision journal benchmark: what a checkpoint and a decision's entry cost, in time and bytes.

    python bench/journal_bench.py [--hosts 10000] [--decisions 20000] [--runs 5] [--out bench/results/x.json]

The fleet is placement_bench's seeded one. Measured, on one CPU:

- a checkpoint: ``Journal.note`` of a replica's first decision (every host whole), run ``--runs``
  times on a fresh journal: the median time (encoding, JSON, zlib) and its packed size;
- a stream of ``--decisions`` decisions as one replica makes them: each decided (untimed), noted
  (timed) and booked on its host; before every fourth, one host rewritten as another replica's claim
  or a heartbeat would. Reported: a delta entry's median and p99 time and median size, and the bytes
  per decision amortised over the stream, its checkpoints included (a checkpoint comes every
  ``max(512, fleet size)`` entries, so twice the fleet's size of decisions holds two);
- the same with the fleet's churn as a scheduler reads it (``--rates``, per strategy of
  ``--churn-strategies``): every host announced again every 5 s (the gateway's ``bump_interval``, a
  third of the 15 s offline timeout) with a new heartbeat instant and measured usage: 2,000/R hosts
  re-read between two decisions at R decisions a second on 10,000 hosts. The journal keeps a
  heartbeat only when its offline verdict changes, and usage only for decisions whose strategy reads
  it (``least_utilized``), so the re-reads cost ``least_utilized`` decisions and hardly any other.
  Each re-read goes through the scheduler's own ``UsageCadence`` (``--usage-refresh``, as
  VMSCHED_USAGE_REFRESH_INTERVAL, default 30 s): a host takes its new usage at most once per
  interval, the times it last took one spread over the interval before the run (a scheduler that has
  run a while); ``--usage-refresh 0`` takes it at every re-read (the scheduler before the setting).
  Amortised: the mean entry plus a checkpoint's bytes over the entries between two.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.placement_bench import (  # noqa: E402
    NOW,
    OFFLINE_TIMEOUT,
    build_hosts,
    build_requests,
    git_commit,
    pin_to_one_cpu,
)
from vmsched_contract.strategy import Strategy  # noqa: E402
from vmsched_placement import DecisionContext, Fleet, Weights, decide  # noqa: E402
from vmsched_placement.journal import Journal  # noqa: E402
from vmsched_scheduler.usage_cadence import UsageCadence  # noqa: E402

BUMP_INTERVAL = 5.0  # the gateway announces an unchanged host every offline timeout / 3 (15 s / 3)
STRATEGIES = [Strategy.LEAST_LOADED, Strategy.BEST_FIT, Strategy.ROUND_ROBIN, Strategy.LEAST_UTILIZED]


def context(number: int) -> DecisionContext:
    return DecisionContext(NOW + number * 0.001, OFFLINE_TIMEOUT, Weights(), random.Random(number), number)


def time_checkpoints(hosts: int, runs: int, seed: int) -> dict[str, Any]:
    fleet = Fleet.from_hosts(build_hosts(hosts, random.Random(seed)))
    request = build_requests(1, hosts, Strategy.LEAST_LOADED, random.Random(seed))[0]
    seconds, sizes = [], []
    for _ in range(runs):
        journal = Journal(Weights(), OFFLINE_TIMEOUT)
        gc.collect()
        started = time.perf_counter()
        entry = journal.note(fleet, request, context(0), None)
        seconds.append(time.perf_counter() - started)
        assert entry.checkpoint
        sizes.append(len(entry.body))
    return {"median_s": statistics.median(seconds), "min_s": min(seconds), "bytes": sizes[0]}


def time_stream(hosts: int, decisions: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    host_states = build_hosts(hosts, random.Random(seed))
    fleet = Fleet.from_hosts(host_states)
    requests = build_requests(decisions, hosts, Strategy.LEAST_LOADED, random.Random(seed + 1))
    journal = Journal(Weights(), OFFLINE_TIMEOUT)
    delta_us: list[float] = []
    delta_bytes: list[int] = []
    checkpoints: list[tuple[float, int]] = []
    total = 0
    for number, request in enumerate(requests):
        if number % 4 == 3:  # another replica's claim, or a heartbeat, read from the snapshot
            host = host_states[rng.randrange(hosts)]
            fleet.upsert(replace(host, last_heartbeat=NOW + number * 0.001, vm_count=host.vm_count + 1))
        request = replace(request, strategy=STRATEGIES[number % len(STRATEGIES)])
        own = context(number)
        decision = decide(fleet, request, own)
        started = time.perf_counter()
        entry = journal.note(fleet, request, own, None)
        spent = time.perf_counter() - started
        total += len(entry.body)
        if entry.checkpoint:
            checkpoints.append((spent, len(entry.body)))
        else:
            delta_us.append(spent * 1e6)
            delta_bytes.append(len(entry.body))
        if decision.host_id is not None:
            fleet.allocate(decision.host_id, request.demand)
    delta_us.sort()
    return {
        "decisions": decisions,
        "checkpoints": len(checkpoints),
        "checkpoint_s": [round(s, 4) for s, _ in checkpoints],
        "checkpoint_bytes": [b for _, b in checkpoints],
        "delta_median_us": round(statistics.median(delta_us), 1),
        "delta_p99_us": round(delta_us[int(len(delta_us) * 0.99)], 1),
        "delta_median_bytes": statistics.median(delta_bytes),
        "bytes_total": total,
        "bytes_per_decision": round(total / decisions, 1),
    }


def time_churn(
    hosts: int,
    rate: float,
    decisions: int,
    seed: int,
    *,
    usage: bool = True,
    strategy: Strategy = Strategy.LEAST_LOADED,
    usage_refresh: float = 30.0,
) -> dict[str, Any]:
    """``decisions`` decisions of ``strategy`` at ``rate`` a second while every host is re-read every
    5 s (its measured usage new each time, or, ``usage`` False, as it was), the scheduler taking a
    host's new usage at most once per ``usage_refresh`` seconds."""
    rng = random.Random(seed)
    cadence = UsageCadence(usage_refresh)
    fleet = Fleet.from_hosts(
        # Each host's usage taken at some time in the interval before the run: the steady state.
        cadence.keep(replace(h, status="online", last_heartbeat=NOW), NOW - rng.random() * usage_refresh)
        for h in build_hosts(hosts, random.Random(seed))
    )
    requests = build_requests(decisions, hosts, strategy, random.Random(seed + 1))
    journal = Journal(Weights(), OFFLINE_TIMEOUT)
    phase = sorted((rng.random() * BUMP_INTERVAL, host_id) for host_id in fleet.host_ids)
    sizes: list[int] = []
    spent: list[float] = []
    reread = 0  # announcements read so far: host phase[reread % hosts], in period reread // hosts
    renewed = 0  # re-reads whose usage the scheduler took (a change the journal may write)

    def next_at() -> float:
        return NOW + (reread // hosts) * BUMP_INTERVAL + phase[reread % hosts][0]

    for number, request in enumerate(requests):
        now = NOW + number / rate
        while next_at() <= now:
            host = fleet.host(phase[reread % hosts][1])
            assert host is not None
            measured = host.usage
            if measured is not None and usage:
                measured = replace(measured, cpu_used=measured.cpu_used * rng.uniform(0.95, 1.05))
            seen = cadence.keep(replace(host, last_heartbeat=next_at(), usage=measured), next_at())
            renewed += seen.usage is not host.usage
            fleet.upsert(seen)
            reread += 1
        own = replace(context(number), now=now)
        decision = decide(fleet, request, own)
        started = time.perf_counter()
        entry = journal.note(fleet, request, own, None)
        spent.append(time.perf_counter() - started)
        if not entry.checkpoint:
            sizes.append(len(entry.body))
        if decision.host_id is not None:
            fleet.allocate(decision.host_id, request.demand)
    checkpoint = time_checkpoints(hosts, 1, seed)["bytes"]
    mean = statistics.mean(sizes)
    return {
        "rate": rate,
        "strategy": strategy.value,
        "decisions": decisions,
        "usage_refresh_s": usage_refresh,
        "hosts_reread_per_entry": round(reread / decisions, 1),
        "usage_taken_per_entry": round(renewed / decisions, 1),
        "entry_mean_bytes": round(mean),
        "entry_median_us": round(statistics.median(spent) * 1e6, 1),
        "bytes_per_decision": round(mean + checkpoint / max(512, hosts)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument(
        "--rates", default="10,100,1000", help="decisions a second of the churn runs (comma-separated; empty: none)"
    )
    parser.add_argument("--still-usage", action="store_true", help="churn runs: re-read hosts keep their usage")
    parser.add_argument(
        "--churn-strategies",
        default="least_loaded,least_utilized",
        help="churn runs: one run per rate and strategy (comma-separated; least_utilized reads measured usage)",
    )
    parser.add_argument(
        "--usage-refresh",
        type=float,
        default=30.0,
        help="churn runs: seconds a re-read host keeps its usage (VMSCHED_USAGE_REFRESH_INTERVAL; 0: none)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cpu = pin_to_one_cpu()
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "cpu": cpu,
        "hosts": args.hosts,
        "checkpoint": time_checkpoints(args.hosts, args.runs, args.seed),
        "stream": time_stream(args.hosts, args.decisions, args.seed),
        "churn": [
            # As many decisions as make a few hundred thousand re-reads at most: the slow rates are short,
            # but each run spans four usage intervals at least, for the usage taken at its steady pace.
            time_churn(
                args.hosts,
                rate,
                min(args.decisions, max(200, int(rate * max(60.0, 4 * args.usage_refresh)))),
                args.seed,
                usage=not args.still_usage,
                strategy=Strategy(strategy),
                usage_refresh=args.usage_refresh,
            )
            for strategy in args.churn_strategies.split(",")
            for rate in (float(r) for r in args.rates.split(",") if r)
        ],
    }
    checkpoint, stream = result["checkpoint"], result["stream"]
    print(
        f"{args.hosts} hosts: a checkpoint takes {checkpoint['median_s'] * 1000:.0f} ms (median of {args.runs}), "
        f"{checkpoint['bytes'] / 1024:.0f} KiB packed"
    )
    print(
        f"{stream['decisions']} decisions, {stream['checkpoints']} checkpoints: a delta entry takes "
        f"{stream['delta_median_us']:.0f} us (p99 {stream['delta_p99_us']:.0f}), {stream['delta_median_bytes']:.0f} "
        f"bytes; {stream['bytes_per_decision']:.0f} bytes per decision amortised"
    )
    for churn in result["churn"]:
        print(
            f"with every host re-read every 5 s, {churn['rate']:g} {churn['strategy']} decisions/s: "
            f"{churn['hosts_reread_per_entry']:g} hosts re-read per entry ({churn['usage_taken_per_entry']:g} with "
            f"usage taken, every {churn['usage_refresh_s']:g} s at most), {churn['entry_mean_bytes']} bytes per entry, "
            f"{churn['bytes_per_decision']} bytes per decision amortised, "
            f"{churn['entry_median_us']:.0f} us per entry (median)"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
