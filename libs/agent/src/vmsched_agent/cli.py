"""``vmsched-agent simulate --count N``: a fleet of fake hypervisors in one process; and
``vmsched-agent libvirt --uri URI --host-id ID``, a real host's agent (vmsched_agent.libvirt.command)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from vmsched_agent.credentials import read_credentials
from vmsched_agent.hosts import ALL_CAPABILITIES, HostSpec, Profile, generate_hosts, load_hosts, parse_labels
from vmsched_agent.simulator import FAILABLE_STEPS, SimulatedFleet
from vmsched_amqp.agent_identity import AgentCredentials
from vmsched_contract.messages import Overcommit, Resources
from vmsched_runtime.logs import configure_logging, get_logger
from vmsched_runtime.settings import Settings, load_settings
from vmsched_runtime.telemetry import setup_tracing

SERVICE = "vmsched-agent"
log = get_logger("vmsched_agent.cli")


def _positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    return parse


def _not_negative(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
        return value

    return parse


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _extra(text: str) -> dict[str, int]:
    try:
        counts = {name: int(count) for name, count in parse_labels(text).items()}
        return Resources(cpu=0, memory_mb=0, disk_gb=0, extra=counts).extra
    except ValidationError as error:
        raise argparse.ArgumentTypeError(_describe(error)) from None
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected name=count,...: {error}") from None


def _labels(text: str) -> dict[str, str]:
    try:
        return parse_labels(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _capabilities(text: str) -> list[str]:
    found = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(found) - set(ALL_CAPABILITIES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; valid: {', '.join(ALL_CAPABILITIES)}")
    return found


def _names(text: str) -> list[str]:
    """Comma-separated names, each once (the heartbeat refuses a name given twice)."""
    return sorted({part.strip() for part in text.split(",") if part.strip()})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=SERVICE, description="vmsched hypervisor agent tools")
    commands = parser.add_subparsers(dest="command", required=True)
    simulate = commands.add_parser(
        "simulate",
        help="run N fake hypervisors in one process",
        description="Run fake hypervisors that heartbeat, take commands and report VM status. "
        "Broker and logging settings come from the environment (VMSCHED_AMQP_URL, VMSCHED_LOG_LEVEL, ...).",
    )
    hosts = simulate.add_argument_group("hosts")
    hosts.add_argument("--count", type=_positive(int), help="how many hosts (required without --hosts-from)")
    hosts.add_argument("--prefix", default="sim", help="host ids are <prefix>-0001, ... (default: sim)")
    hosts.add_argument("--cpu", type=_not_negative(int), default=32, help="vCPUs per host (default: 32)")
    hosts.add_argument("--memory-mb", type=_not_negative(int), default=131072, help="MiB per host (default: 131072)")
    hosts.add_argument("--disk-gb", type=_not_negative(int), default=1000, help="GB per host (default: 1000)")
    hosts.add_argument("--gpu", type=_not_negative(int), default=0, help="GPUs per host (default: 0)")
    hosts.add_argument(
        "--extra",
        type=_extra,
        default={},
        help="named extra resources per host, name=count,... (e.g. fpga=2; default: none)",
    )
    hosts.add_argument(
        "--profile",
        type=Profile,
        choices=list(Profile),
        default=Profile.UNIFORM,
        help="uniform: every host as above; mixed: a seeded mix of small, medium, large and GPU hosts "
        "(labelled size=...), ignoring --cpu/--memory-mb/--disk-gb/--gpu/--extra",
    )
    hosts.add_argument("--labels", type=_labels, default={}, help="k=v,... added to every host")
    hosts.add_argument("--zones", type=_not_negative(int), default=0, help="label hosts zone=z1..zN, round robin")
    hosts.add_argument(
        "--networks",
        type=_names,
        help="the networks every host reaches, comma-separated (e.g. vlan-100,vlan-200); default: none, "
        "or each host's own with --hosts-from",
    )
    hosts.add_argument("--overcommit-cpu", type=float, default=1.0, help="cpu allocation ratio (default: 1.0)")
    hosts.add_argument("--overcommit-memory", type=float, default=1.0, help="memory allocation ratio (default: 1.0)")
    hosts.add_argument("--overcommit-disk", type=float, default=1.0, help="disk allocation ratio (default: 1.0)")
    hosts.add_argument(
        "--hosts-from",
        type=Path,
        metavar="FILE",
        help="JSON hosts (an array, or one per line) shaped as GET /v1/hosts items: id, capacity, labels",
    )
    hosts.add_argument(
        "--credentials",
        type=Path,
        metavar="FILE",
        help="each host's broker credentials, as vmsched-gateway enroll-agent prints them (one JSON line per "
        "host; '-': standard input): each host then connects as its own user. Without: every host shares one "
        "connection as VMSCHED_AMQP_URL's user, which a gateway with VMSCHED_AGENT_AUTH=required refuses",
    )
    behaviour = simulate.add_argument_group("behaviour")
    behaviour.add_argument(
        "--heartbeat-interval", type=_positive(float), help="seconds (default: VMSCHED_AGENT_HEARTBEAT_INTERVAL, 5)"
    )
    behaviour.add_argument("--fail-rate", type=_probability, default=0.0, help="probability a create fails")
    behaviour.add_argument("--create-delay", type=_not_negative(float), default=0.0, help="seconds per create")
    behaviour.add_argument(
        "--no-capacity-check",
        dest="check_capacity",
        action="store_false",
        help="accept every create, even one the host has no room for",
    )
    behaviour.add_argument(
        "--no-usage",
        dest="measure_usage",
        action="store_false",
        help="send no measured usage in heartbeats (least_utilized then ranks the hosts by allocation)",
    )
    behaviour.add_argument(
        "--capabilities",
        type=_capabilities,
        help=f"what every host declares beyond create and delete, comma-separated ({', '.join(ALL_CAPABILITIES)}; "
        "'' for none); default: all, or each host's own with --hosts-from",
    )
    behaviour.add_argument(
        "--migration-delay", type=_not_negative(float), default=0.0, help="seconds each migration step takes"
    )
    behaviour.add_argument(
        "--fail-step",
        dest="fail_steps",
        action="append",
        choices=FAILABLE_STEPS,
        default=[],
        help="a hypervisor step that always fails (repeatable): migration rollbacks in tests",
    )
    behaviour.add_argument("--seed", type=int, default=0, help="for --profile mixed and --fail-rate (default: 0)")
    behaviour.add_argument("--stop-after", type=_positive(float), help="seconds; default: until SIGINT/SIGTERM")
    behaviour.add_argument(
        "--queue-wait-timeout",
        type=_positive(float),
        default=120.0,
        help="seconds to wait for the gateway to declare every host's queue (default: 120)",
    )
    behaviour.add_argument("--max-concurrent-commands", type=_positive(int), default=4, help="per host (default: 4)")
    # The libvirt agent's options: its own module (it needs no libvirt to be described, only to run).
    from vmsched_agent.libvirt import command as libvirt_command

    libvirt_command.add_parser(commands)
    return parser


def hosts_from_options(options: argparse.Namespace) -> list[HostSpec]:
    hosts = _hosts(options)
    update: dict[str, list[str]] = {}
    if options.capabilities is not None:
        update["capabilities"] = options.capabilities
    if options.networks is not None:
        update["networks"] = options.networks
    return [host.model_copy(update=update) for host in hosts] if update else hosts


def _hosts(options: argparse.Namespace) -> list[HostSpec]:
    if options.hosts_from is not None:
        return load_hosts(options.hosts_from, labels=options.labels, zones=options.zones)
    return generate_hosts(
        options.count,
        prefix=options.prefix,
        capacity=Resources(
            cpu=options.cpu,
            memory_mb=options.memory_mb,
            disk_gb=options.disk_gb,
            gpu=options.gpu,
            extra=options.extra,
        ),
        profile=options.profile,
        labels=options.labels,
        zones=options.zones,
        overcommit=Overcommit(
            cpu=options.overcommit_cpu, memory=options.overcommit_memory, disk=options.overcommit_disk
        ),
        seed=options.seed,
    )


async def simulate(
    options: argparse.Namespace,
    settings: Settings,
    hosts: Sequence[HostSpec],
    credentials: Mapping[str, AgentCredentials] | None = None,
) -> int:
    fleet = SimulatedFleet(
        hosts,
        amqp_url=str(settings.amqp_url) if credentials is None else None,
        credentials=None if credentials is None else {host_id: c.amqp_url for host_id, c in credentials.items()},
        heartbeat_interval=options.heartbeat_interval or settings.agent_heartbeat_interval,
        create_delay=options.create_delay,
        fail_rate=options.fail_rate,
        check_capacity=options.check_capacity,
        seed=options.seed,
        queue_wait_timeout=options.queue_wait_timeout,
        max_concurrent_commands=options.max_concurrent_commands,
        record_commands=False,
        measure_usage=options.measure_usage,
        migration_delay=options.migration_delay,
        fail_steps=options.fail_steps,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    log.info(
        "fleet starting",
        hosts=len(hosts),
        amqp=_without_password(str(settings.amqp_url)),
        own_users=credentials is not None,
    )
    starting = asyncio.create_task(fleet.start())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await fleet.stop()
        log.info("fleet stopped before it was ready")
        return 0
    stopped.cancel()
    if (error := starting.exception()) is not None:
        log.error("fleet did not start", error=str(error) or repr(error))
        return 1

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), options.stop_after)
    log.info("fleet stopping")
    await fleet.stop()
    totals = fleet.total_commands()
    log.info(
        "fleet stopped",
        hosts=len(hosts),
        startup_seconds=round(fleet.startup_seconds or 0.0, 2),
        commands={action.value: count for action, count in totals.items()},
        vms=sum(len(agent.vm_ids) for agent in fleet.agents.values()),
    )
    return 0


def _describe(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'host'}: {item['msg']}" for item in error.errors()[:5]
    )


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}@{host}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options = parser.parse_args(argv)
    if options.command == "libvirt":
        from vmsched_agent.libvirt import command as libvirt_command

        return libvirt_command.main(options)
    if options.hosts_from is None and options.count is None:
        parser.error("simulate: give --count N or --hosts-from FILE")
    settings = load_settings(SERVICE)
    try:
        hosts = hosts_from_options(options)
    except ValidationError as error:
        print(f"{SERVICE}: bad hosts: {_describe(error)}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:
        print(f"{SERVICE}: bad hosts: {error}", file=sys.stderr)
        return 2
    if not hosts:
        print(f"{SERVICE}: no hosts to simulate", file=sys.stderr)
        return 2
    credentials = None
    if options.credentials is not None:
        try:
            credentials = read_credentials(options.credentials)
        except (OSError, ValueError) as error:
            print(f"{SERVICE}: bad credentials: {error}", file=sys.stderr)
            return 2
        without = [host.id for host in hosts if host.id not in credentials]
        if without:
            print(
                f"{SERVICE}: no credentials for host {without[0]} ({len(without)} of {len(hosts)} hosts without; "
                f"vmsched-gateway enroll-agent {without[0]} makes them)",
                file=sys.stderr,
            )
            return 2
    configure_logging(SERVICE, settings.log_level, settings.log_format)
    setup_tracing("agent", settings)
    return asyncio.run(simulate(options, settings, hosts, credentials))
