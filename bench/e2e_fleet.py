"""The simulated fleet of the end-to-end benchmark, in a process of its own.

    python bench/e2e_fleet.py --count 10000 --receipts FILE [--profile mixed] [--heartbeat-interval 30]

Runs a :class:`SimulatedFleet` (one broker connection, ``count`` agent queues) so that its event loop
does not compete with the load generator's. Every 50 ms it appends the commands taken off the agent
queues since the last write to ``FILE``, one ``<vm id> <host id> <unix time>`` line each; the harness
tails that file. Once every host consumes its queue it writes ``FILE.ready`` (the startup time in
seconds). Stops on SIGTERM or SIGINT. VMSCHED_AMQP_URL comes from the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import uvloop

from vmsched_agent import Profile, SimulatedFleet, generate_hosts
from vmsched_agent.hosts import parse_labels
from vmsched_contract.messages import Overcommit, Resources
from vmsched_runtime.heap import freeze_startup_objects
from vmsched_runtime.logs import configure_logging
from vmsched_runtime.settings import load_settings

FLUSH_EVERY = 0.05
UNIFORM_CAPACITY = Resources(cpu=32, memory_mb=128 * 1024, disk_gb=1000)


async def run(options: argparse.Namespace) -> int:
    settings = load_settings("e2e-fleet")
    hosts = generate_hosts(
        options.count,
        prefix=options.prefix,
        capacity=UNIFORM_CAPACITY,
        profile=Profile(options.profile),
        labels=parse_labels(options.labels),
        overcommit=Overcommit(cpu=options.overcommit_cpu),
        seed=7,
    )
    fleet = SimulatedFleet(
        hosts,
        amqp_url=str(settings.amqp_url),
        heartbeat_interval=options.heartbeat_interval,
        queue_wait_timeout=600.0,
        record_commands=False,
        record_receipts=True,
        # A command is taken and answered at once; more at a time only queue up in this process.
        max_concurrent_commands=2,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    receipts: Path = options.receipts
    await fleet.start()
    freeze_startup_objects()  # as the services do: the agents' hosts live as long as the process
    Path(f"{receipts}.ready").write_text(f"{fleet.startup_seconds or 0.0:.3f}\n")  # noqa: ASYNC240
    with receipts.open("a", buffering=1 << 16) as out:
        while not stop.is_set():
            taken = fleet.take_receipts()
            if taken:
                out.write("".join(f"{r.vm_id} {r.host_id} {r.at:.6f}\n" for r in taken))
                out.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), FLUSH_EVERY)
    await fleet.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--receipts", type=Path, required=True)
    parser.add_argument("--prefix", default="bench")
    parser.add_argument("--profile", choices=[p.value for p in Profile], default=Profile.MIXED.value)
    parser.add_argument("--heartbeat-interval", type=float, default=30.0)
    parser.add_argument("--labels", default="", help="k=v,... on every host")
    parser.add_argument("--overcommit-cpu", type=float, default=1.0)
    options = parser.parse_args()
    configure_logging("e2e-fleet", "WARNING", "json")
    return uvloop.run(run(options))


if __name__ == "__main__":
    sys.exit(main())
