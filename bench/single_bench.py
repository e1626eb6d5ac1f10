"""The single-request benchmark: one VM per ``POST /v1/vms``, the way most clients create VMs.

    python bench/single_bench.py                       # what `make bench` runs: 3 runs on 200 hosts
    python bench/single_bench.py --runs 1 --seconds 5  # a quick look (about 2 minutes)

On one stack (API, 2 schedulers, gateway: devtools.Stack) and an independent fleet process speaking
the queue contract (bench/e2e_fleet.py), on an own vhost, database and Redis prefix, each run:

- ``hop``: the broker's raw hop flat out, in the same run: confirmed publishes of 256-byte messages
  (about a one-VM ``vm.create``) to one quorum queue, consumed and acked (messages/s). A placement
  crosses three hops (``vm.create``, ``vm.assigned``, the agent's command), so ``hop / 3`` is the
  ceiling RabbitMQ alone would set if every VM travelled alone: the batch target is 0.75x of it;
- ``lone``: one client posting one VM after another: the response's p50 and p99;
- ``clients32``: 32 clients posting as fast as answers come: accepted POSTs/s, response p50/p99,
  and CPU per placement of every process on the machine (until every VM reached its agent);
- ``open100`` and ``open300``: an open loop at 100 and 300 POSTs/s: POST -> the agent taking the
  create command off its queue (both clocks this machine's), p50 and p99;
- ``batch``: ``POST /v1/vms/batch`` of 500 VMs, 3 at a time, flat out: placements/s end to end
  against ``hop / 3``, and CPU per placement.

For ``lone`` and ``clients32`` the API's own account of each request phase
(``vmsched_api_request_phase_seconds``, read from /metrics before and after) shows where a request
waits. The load generator is ``bench/wire_client.py`` (tens of µs a request, where httpx spent 1-2 ms,
taken from the machine under test). Results: ``bench/results/single-<date>.json``, medians of the
runs printed last beside each target.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.e2e.fleets import stack_with_fleets  # noqa: E402
from bench.e2e.isolation import isolated  # noqa: E402
from bench.e2e.machine import git_commit, machine  # noqa: E402
from bench.single.load import Load, open_loop  # noqa: E402
from bench.single.phases import PHASES, one_run, settle  # noqa: E402
from bench.single.plan import OVERCOMMIT_CPU  # noqa: E402
from bench.single.summary import print_summary, summary  # noqa: E402


def main() -> int:
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the lone and clients32 phases")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"which of {','.join(PHASES)} (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"single-{today}.json")
    options = parser.parse_args()
    phases = [phase for phase in options.phases.split(",") if phase]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        parser.error(f"unknown phase {', '.join(unknown)}; valid: {', '.join(PHASES)}")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="vmsched-single-") as tmp:
        workdir = Path(tmp)
        with (
            isolated() as iso,
            stack_with_fleets(iso, workdir, [("single", options.hosts, "uniform", "", OVERCOMMIT_CPU)]) as (
                stack,
                fleets,
                startup,
            ),
        ):
            print(f"fleet of {options.hosts} ready in {startup:.1f} s", flush=True)

            async def runs() -> list[dict[str, Any]]:
                # Not measured: the pools and caches fill in the first seconds.
                load = Load(stack)
                sent, _, _ = await open_loop(load, 100.0, 3.0)
                await settle(fleets, sent)
                done = []
                for n in range(options.runs):
                    print(f"run {n + 1} of {options.runs}", flush=True)
                    done.append(await one_run(stack, fleets, options.seconds, f"run{n + 1}", phases))
                return done

            all_runs = uvloop.run(runs())
    result = {
        "commit": git_commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "hosts": options.hosts,
        "seconds": options.seconds,
        "wall_s": round(time.time() - started, 1),
        "runs": all_runs,
        "summary": summary(all_runs),
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    print_summary(result)
    print(f"\nsaved {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
