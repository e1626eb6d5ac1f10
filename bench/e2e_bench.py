"""End-to-end benchmark: the real services on the local servers, a simulated fleet, a load generator.

    python bench/e2e_bench.py            # what `make bench` runs (about 6 minutes)
    BENCH_QUICK=1 python bench/e2e_bench.py            # one short run per fleet size (about 2 minutes)
    BENCH_HOSTS=1000 BENCH_RUNS=1 python bench/e2e_bench.py --out /tmp/x.json

What runs (docs/performance.md has the why): API, 2 scheduler replicas and the gateway (devtools.Stack),
and the fleet in a process of its own (bench/e2e_fleet.py), all against an own RabbitMQ vhost, own
PostgreSQL database and own Redis key prefix, removed afterwards. For each fleet size, on one stack:

- latency: single ``POST /v1/vms`` at a fixed offered rate (100/s): how long from the request to
  ``scheduled`` (p99, the target) and to the agent (after 3 s of the same, not measured, once per
  stack: the services' pools and caches fill);
- sweep: ``POST /v1/vms/batch`` at rising offered rates, then as fast as the API takes them
  (saturation: the sustained placements/s, and CPU per placement per component);
- messages: broker messages per VM, counted by a tap on the ``vmsched`` exchange while batches and
  single POSTs go through (and the agents' commands, one each);

and, with the broker floor ``bench/broker_floor.py`` saved (``make bench`` runs it first), the
ratio of the placements/s achieved to the ceiling RabbitMQ alone would set for the messages a
placement costs.

end to end means from the moment the load generator sends the request to the moment the agent takes
the create command off its queue (both clocks are this machine's). Then, from PostgreSQL, each
placement's decision time and claim conflicts (kept in its decision record), and from /proc the
schedulers' peak RSS. Separately, on a fleet without overcommit: filling it to 80% with mixed-size
VMs (claim conflicts under contention), and packing (best_fit against the lower bound, least_loaded's
spread), each on its own pool of identical hosts. Last, placements beside 10,000 waiting VMs: the
latency phase and saturation (while the latency phase's VMs are deleted, so capacity is released all
along) with none waiting, then again with 10,000 waiting in 100 shapes (issue 13: at most 10%
slower); ``--waiting-only`` runs just that.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.e2e.contention import contention_and_packing  # noqa: E402
from bench.e2e.fleet_sizes import fleet_size_run  # noqa: E402
from bench.e2e.machine import git_commit, machine, rabbitmq_fd_limit  # noqa: E402
from bench.e2e.plan import (  # noqa: E402
    HEARTBEAT_INTERVAL,
    LATENCY_RATE,
    SCHEDULERS,
    SMALL_VM,
    THROUGHPUT_OVERCOMMIT_CPU,
    plan_from_env,
)
from bench.e2e.plot import plot  # noqa: E402
from bench.e2e.results import broker_ceiling, broker_floor, by_phase, print_table, verdicts  # noqa: E402
from bench.e2e.waiting import WAITING_VMS, waiting_backlog_run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description="vmsched end-to-end benchmark")
    today = datetime.now(UTC).date().isoformat()
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"e2e-{today}.json")
    parser.add_argument("--no-extra", action="store_true", help="skip the contention and packing stack")
    parser.add_argument(
        "--waiting-only",
        action="store_true",
        help="only the waiting phase: placements with and without 10,000 waiting VMs (BENCH_WAITING_HOSTS hosts)",
    )
    options = parser.parse_args()
    plan = plan_from_env()
    waiting_hosts = int(os.environ.get("BENCH_WAITING_HOSTS", "1000"))
    waiting_vms = int(os.environ.get("BENCH_WAITING_VMS", str(WAITING_VMS)))
    if options.waiting_only:
        with tempfile.TemporaryDirectory(prefix="vmsched-bench-") as tmp:
            backlog = waiting_backlog_run(plan, waiting_hosts, waiting_vms, Path(tmp))
        out = options.out.with_name(options.out.stem.replace("e2e-", "waiting-") + ".json")
        out.write_text(
            json.dumps({"benchmark": "waiting", "git_commit": git_commit(), "machine": machine(), **backlog}, indent=2)
            + "\n"
        )
        print(f"saved {out}")
        return 0
    limit = rabbitmq_fd_limit()
    if limit is not None and limit < max(plan.hosts) + 1000:
        print(
            f"warning: RabbitMQ may open only {limit} files, and {max(plan.hosts)} agent queues need more; "
            "raise it first (docs/performance.md)",
            flush=True,
        )
    recorded_at = datetime.now(UTC).isoformat()
    started = time.monotonic()
    info = machine()
    print(f"machine: python loop {info['python_loop_s']} s (docs/performance.md, 'Comparing runs')", flush=True)
    with tempfile.TemporaryDirectory(prefix="vmsched-bench-") as tmp:
        workdir = Path(tmp)
        sizes = []
        for hosts in plan.hosts:
            size = fleet_size_run(plan, hosts, workdir / f"h{hosts}")
            size["phases"] = by_phase(size)
            floor = broker_floor(options.out.parent)
            size["broker_ceiling"] = broker_ceiling(size, floor) if floor else None
            sizes.append(size)
        skip_extra = options.no_extra or os.environ.get("BENCH_EXTRA") == "0"
        extra = None if skip_extra else contention_and_packing(plan, workdir / "extra")
        waiting = None if skip_extra else waiting_backlog_run(plan, waiting_hosts, waiting_vms, workdir / "waiting")
    result = {
        "benchmark": "e2e",
        "recorded_at": recorded_at,
        "git_commit": git_commit(),
        "settings": {
            **{k: v for k, v in plan.__dict__.items()},
            "schedulers": SCHEDULERS,
            "latency_rate_per_s": LATENCY_RATE,
            "heartbeat_interval_s": HEARTBEAT_INTERVAL,
            "throughput_vm": SMALL_VM,
            "throughput_fleet_overcommit_cpu": THROUGHPUT_OVERCOMMIT_CPU,
            "quick": os.environ.get("BENCH_QUICK") == "1",
            "end_to_end": "load generator sends the request -> agent takes the create command off its queue",
        },
        "machine": {**info, "load_average_at_end": os.getloadavg()},
        "duration_s": round(time.monotonic() - started, 1),
        "fleets": sizes,
        "contention_and_packing": extra,
        "waiting_backlog": waiting,
        "targets": verdicts(sizes, extra),
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, options.out.with_suffix(".png"))
    print_table(result)
    print(f"\nsaved {options.out} and {options.out.with_suffix('.png')} in {result['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
