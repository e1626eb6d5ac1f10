"""``vmsched-agent libvirt --uri URI --host-id ID``: the command line of the libvirt agent."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from vmsched_agent.credentials import read_credentials
from vmsched_agent.libvirt.runner import LibvirtAgent
from vmsched_agent.libvirt.settings import LibvirtAgentSettings, load
from vmsched_agent.libvirt.template import TemplateError
from vmsched_runtime.logs import configure_logging, get_logger
from vmsched_runtime.settings import load_settings
from vmsched_runtime.telemetry import setup_tracing

SERVICE = "vmsched-agent"
log = get_logger("vmsched_agent.libvirt")

# The flags that are settings (LibvirtAgentSettings' fields): each falls back on VMSCHED_LIBVIRT_<NAME>.
SETTING_FLAGS = tuple(LibvirtAgentSettings.model_fields)


def add_parser(commands: Any) -> None:
    """The ``libvirt`` subcommand, on ``vmsched-agent``'s subparsers."""
    parser = commands.add_parser(
        "libvirt",
        help="the agent of one KVM host, through libvirt (needs vmsched-agent[libvirt])",
        description="Run the agent of one hypervisor host managed through libvirt: it heartbeats the host's "
        "capacity and VMs, creates, deletes, stops, starts and live-migrates domains as vmsched commands. Each "
        "option falls back on VMSCHED_LIBVIRT_<OPTION> (--host-id: VMSCHED_LIBVIRT_HOST_ID); the broker and "
        "logging settings are the common ones (VMSCHED_AMQP_URL, VMSCHED_LOG_LEVEL, ...). See docs/agent-libvirt.md.",
    )
    host = parser.add_argument_group("host")
    host.add_argument("--uri", help="the libvirt URI (qemu:///system; test:///default is libvirt's test driver)")
    host.add_argument("--host-id", help="this host's id in vmsched (its queue is agent.<host id>)")
    host.add_argument(
        "--credentials",
        type=Path,
        metavar="FILE",
        help="what `vmsched-gateway enroll-agent <host id>` printed ('-': standard input); "
        "without: VMSCHED_AMQP_URL's user",
    )
    host.add_argument("--pool", help="the storage pool VMs' disks are made in (default: default)")
    host.add_argument("--network", help="the libvirt network VMs' interfaces are on (default: default)")
    host.add_argument("--template", type=Path, metavar="FILE", help="a domain XML template (default: the shipped one)")
    host.add_argument("--volume-format", choices=["qcow2", "raw"], help="VMs' volumes (default: qcow2)")
    host.add_argument("--base-volume", metavar="NAME", help="a volume of the pool each VM's disk starts from")
    host.add_argument(
        "--shared-storage",
        action="store_const",
        const=True,
        help="the pool is the same storage on every host: migrations copy no disk",
    )
    host.add_argument(
        "--migration-uri",
        metavar="URI",
        help="how other hosts' libvirt reaches this one's (qemu+tls://hv-0001/system); without: no migrations",
    )
    host.add_argument("--labels", help="k=v,... announced in heartbeats")
    timing = parser.add_argument_group("timing")
    timing.add_argument("--shutdown-timeout", type=float, help="seconds a guest has to shut down on stop (60)")
    timing.add_argument("--start-timeout", type=float, help="seconds libvirt has to say a domain runs (30)")
    timing.add_argument("--usage-interval", type=float, help="seconds between domain statistics samples (5)")
    timing.add_argument("--check-interval", type=float, help="seconds between checks of the libvirt connection (5)")
    timing.add_argument("--reconnect-max-delay", type=float, help="longest pause between reconnections (30)")
    agent = parser.add_argument_group("agent")
    agent.add_argument("--heartbeat-interval", type=float, help="seconds (VMSCHED_AGENT_HEARTBEAT_INTERVAL, 5)")
    agent.add_argument("--queue-wait-timeout", type=float, default=60.0, help="seconds to wait for the gateway (60)")
    agent.add_argument("--max-concurrent-commands", type=int, default=4, help="commands carried out at once (4)")
    agent.add_argument("--stop-after", type=float, help="seconds; default: until SIGINT or SIGTERM")


def main(options: argparse.Namespace) -> int:
    """Exit status: 0 stopped cleanly, 1 could not start (libvirt, the host, the broker), 2 bad
    configuration."""
    try:
        settings = load({name: getattr(options, name, None) for name in SETTING_FLAGS})
    except ValueError as error:
        print(f"{SERVICE} libvirt: {error}", file=sys.stderr)
        return 2
    common = load_settings(SERVICE)
    amqp_url = str(common.amqp_url)
    if settings.credentials is not None:
        try:
            credentials = read_credentials(settings.credentials)
        except (OSError, ValueError) as error:
            print(f"{SERVICE} libvirt: bad credentials: {error}", file=sys.stderr)
            return 2
        if settings.host_id not in credentials:
            print(
                f"{SERVICE} libvirt: no credentials for host {settings.host_id} in {settings.credentials} "
                f"(vmsched-gateway enroll-agent {settings.host_id} makes them)",
                file=sys.stderr,
            )
            return 2
        amqp_url = credentials[settings.host_id].amqp_url
    try:
        runner = LibvirtAgent(
            settings,
            amqp_url=amqp_url,
            heartbeat_interval=options.heartbeat_interval or common.agent_heartbeat_interval,
            max_concurrent_commands=options.max_concurrent_commands,
            queue_wait_timeout=options.queue_wait_timeout,
        )
    except ModuleNotFoundError as error:
        if error.name not in ("libvirt", "libvirtmod"):
            raise
        print(
            f"{SERVICE} libvirt: libvirt-python is not installed: pip install 'vmsched-agent[libvirt]' "
            "(it builds against libvirt's headers: apt-get install libvirt-dev pkg-config)",
            file=sys.stderr,
        )
        return 2
    except (OSError, TemplateError) as error:
        print(f"{SERVICE} libvirt: template: {error}", file=sys.stderr)
        return 2
    configure_logging(SERVICE, common.log_level, common.log_format)
    setup_tracing("agent", common)
    return asyncio.run(serve(runner, options.stop_after))


async def serve(runner: LibvirtAgent, stop_after: float | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log.info("libvirt agent starting", host=runner.settings.host_id, uri=runner.settings.uri)
    starting = asyncio.create_task(runner.start())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        log.info("libvirt agent stopped before it was ready")
        return 0
    stopped.cancel()
    if (error := starting.exception()) is not None:
        # libvirt unreachable (HostError), a host that cannot serve as configured (SetupError), no
        # gateway (AgentQueueMissing), no broker: one line, and the service manager tries again.
        log.error("libvirt agent did not start", error=str(error) or repr(error), kind=type(error).__name__)
        return 1
    log.info("libvirt agent started", host=runner.settings.host_id, vms=len(runner.agent.vm_ids))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), stop_after)
    log.info("libvirt agent stopping")
    await runner.stop()
    log.info("libvirt agent stopped", commands={a.value: n for a, n in runner.agent.stats.commands_received.items()})
    return 0
