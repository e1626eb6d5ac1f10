"""``vmsched-agent simulate``: options, and the process against the real broker (as the services' user,
or each host as its own, enrolled)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.agent.standin import StandInGateway
from tests.fleets import enroll
from tests.servers import Servers
from vmsched_agent.cli import build_parser, hosts_from_options, main
from vmsched_agent.hosts import Profile
from vmsched_contract.messages import AgentCommand, CommandAction, ReportedStatus, Resources


def test_simulate_needs_a_count_or_a_hosts_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate"])

    assert exited.value.code == 2
    assert "give --count N or --hosts-from FILE" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--count", "0"),
        ("--fail-rate", "1.5"),
        ("--labels", "novalue"),
        ("--profile", "huge"),
        ("--extra", "fpga=two"),
        ("--extra", "FPGA=1"),
        ("--extra", "fpga=-1"),
    ],
)
def test_a_bad_option_value_is_refused(option: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["simulate", "--count", "1", option, value])

    assert exited.value.code == 2
    assert option in capsys.readouterr().err


def test_options_make_the_hosts() -> None:
    arguments = "simulate --count 4 --prefix lab --cpu 8 --gpu 2 --zones 2 --labels env=ci --overcommit-cpu 4"
    options = build_parser().parse_args(arguments.split())

    hosts = hosts_from_options(options)

    assert [h.id for h in hosts] == ["lab-0001", "lab-0002", "lab-0003", "lab-0004"]
    assert hosts[1].capacity == Resources(cpu=8, memory_mb=131072, disk_gb=1000, gpu=2)
    assert hosts[1].labels == {"env": "ci", "zone": "z2"}
    assert hosts[1].overcommit.cpu == 4.0
    assert options.profile is Profile.UNIFORM


def test_extra_resources_are_given_to_every_host() -> None:
    options = build_parser().parse_args(["simulate", "--count", "2", "--extra", "fpga=2,example.com/nic=1"])

    assert {h.id: h.capacity.extra for h in hosts_from_options(options)} == {
        "sim-0001": {"fpga": 2, "example.com/nic": 1},
        "sim-0002": {"fpga": 2, "example.com/nic": 1},
    }


def test_networks_are_given_to_every_host_each_once() -> None:
    options = build_parser().parse_args(["simulate", "--count", "2", "--networks", "vlan-200, vlan-100,vlan-200"])

    hosts = hosts_from_options(options)

    assert [h.networks for h in hosts] == [["vlan-100", "vlan-200"]] * 2
    plain = build_parser().parse_args(["simulate", "--count", "1"])
    assert hosts_from_options(plain)[0].networks == []


def test_an_unreadable_hosts_file_stops_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "hosts.json"
    bad.write_text('[{"id": "h1", "capacity": {"cpu": -1, "memory_mb": 1, "disk_gb": 1}}]')

    assert main(["simulate", "--hosts-from", str(bad)]) == 2
    assert main(["simulate", "--hosts-from", str(tmp_path / "missing.json")]) == 2

    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "vmsched-agent: bad hosts: 0.capacity.cpu: Input should be greater than or equal to 0"
    assert lines[1].startswith("vmsched-agent: bad hosts: [Errno 2]")


async def read_until(stream: asyncio.StreamReader, message: str, seen: list[dict[str, Any]]) -> dict[str, Any]:
    """Log lines (JSON) until one whose message is ``message``."""
    while line := await stream.readline():
        entry: dict[str, Any] = json.loads(line)
        seen.append(entry)
        if entry.get("message") == message:
            return entry
    raise AssertionError(f"the process ended without logging {message!r}; it logged {seen}")


async def start_simulator(servers: Servers, *args: str) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "VMSCHED_AMQP_URL": servers.amqp_url,
        "VMSCHED_LOG_FORMAT": "json",
        "VMSCHED_LOG_LEVEL": "INFO",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "vmsched_agent", "simulate", *args, env=env, stderr=asyncio.subprocess.PIPE
    )


async def test_the_simulator_takes_commands_and_stops_cleanly_on_sigterm(
    servers: Servers, gateway: StandInGateway
) -> None:
    prefix = f"cli{uuid.uuid4().hex[:6]}"
    process = await start_simulator(servers, "--count", "3", "--prefix", prefix, "--heartbeat-interval", "0.5")
    assert process.stderr is not None
    seen: list[dict[str, Any]] = []
    try:
        started = await asyncio.wait_for(read_until(process.stderr, "fleet started", seen), 15)
        assert started["hosts"] == 3
        command = AgentCommand(
            action=CommandAction.CREATE,
            vm_id=uuid.uuid4(),
            name="vm",
            resources=Resources(cpu=1, memory_mb=512, disk_gb=1),
        )
        await gateway.send(f"{prefix}-0002", command)
        running = await gateway.status(command.vm_id, ReportedStatus.RUNNING)
        assert running.report.agent_id == f"{prefix}-0002"

        process.send_signal(signal.SIGTERM)
        stopped = await asyncio.wait_for(read_until(process.stderr, "fleet stopped", seen), 15)
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert stopped["commands"] == {"create": 1}
    assert stopped["vms"] == 1


async def test_the_simulator_stops_by_itself_after_stop_after(servers: Servers, gateway: StandInGateway) -> None:
    process = await start_simulator(
        servers, "--count", "2", "--prefix", f"cli{uuid.uuid4().hex[:6]}", "--profile", "mixed", "--stop-after", "0.5"
    )
    assert process.stderr is not None
    seen: list[dict[str, Any]] = []
    try:
        await asyncio.wait_for(read_until(process.stderr, "fleet stopped", seen), 15)
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_with_credentials_each_simulated_host_connects_as_its_own_user(
    servers: Servers, gateway: StandInGateway, tmp_path: Path
) -> None:
    prefix = f"cli{uuid.uuid4().hex[:6]}"
    enrolled = await enroll(servers, [f"{prefix}-0001", f"{prefix}-0002"])
    path = tmp_path / "credentials.jsonl"
    path.write_text("".join(credentials.model_dump_json() + "\n" for credentials in enrolled.values()))
    process = await start_simulator(servers, "--count", "2", "--prefix", prefix, "--credentials", str(path))
    assert process.stderr is not None
    seen: list[dict[str, Any]] = []
    try:
        starting = await asyncio.wait_for(read_until(process.stderr, "fleet starting", seen), 15)
        assert starting["own_users"] is True
        await asyncio.wait_for(read_until(process.stderr, "fleet started", seen), 15)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert {host_id: gateway.heartbeat_users[host_id] for host_id in enrolled} == {
        host_id: {credentials.username} for host_id, credentials in enrolled.items()
    }
