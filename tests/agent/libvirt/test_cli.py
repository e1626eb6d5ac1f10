"""``vmsched-agent libvirt`` as an operator runs it: a process, enrolled credentials, libvirt's test
driver, the broker; and the one-line refusals."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.agent.libvirt.conftest import command
from tests.agent.standin import StandInGateway
from tests.agent.test_cli import read_until
from tests.fleets import enroll
from tests.servers import Servers
from vmsched_contract.messages import CommandAction, ReportedStatus


async def start_agent(servers: Servers, *args: str) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "VMSCHED_AMQP_URL": servers.amqp_url,
        "VMSCHED_LOG_FORMAT": "json",
        "VMSCHED_LOG_LEVEL": "INFO",
        "VMSCHED_AGENT_HEARTBEAT_INTERVAL": "0.5",
        "VMSCHED_LIBVIRT_POOL": "default-pool",  # the test driver's
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "vmsched_agent", "libvirt", *args, env=env, stderr=asyncio.subprocess.PIPE
    )


async def test_the_libvirt_agent_runs_as_its_enrolled_user_takes_commands_and_stops_on_sigterm(
    servers: Servers, gateway: StandInGateway, tmp_path: Path
) -> None:
    host_id = f"kvm-{uuid.uuid4().hex[:8]}"
    enrolled = await enroll(servers, [host_id])
    credentials = tmp_path / "credentials.jsonl"
    credentials.write_text(enrolled[host_id].model_dump_json() + "\n")
    process = await start_agent(
        servers, "--uri", "test:///default", "--host-id", host_id, "--credentials", str(credentials)
    )
    assert process.stderr is not None
    seen: list[dict[str, Any]] = []
    try:
        await asyncio.wait_for(read_until(process.stderr, "libvirt agent started", seen), 30)
        create = command(CommandAction.CREATE)
        await gateway.send(host_id, create)
        await gateway.status(create.vm_id, ReportedStatus.RUNNING)

        process.send_signal(signal.SIGTERM)
        stopped = await asyncio.wait_for(read_until(process.stderr, "libvirt agent stopped", seen), 15)
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert stopped["commands"] == {"create": 1}
    assert gateway.heartbeat_users[host_id] == {enrolled[host_id].username}
    beat = await gateway.heartbeat(host_id, lambda b: b.leaving)
    assert beat.vm_ids == [create.vm_id]


async def test_a_libvirt_it_cannot_reach_at_start_up_stops_it_with_one_line(servers: Servers) -> None:
    process = await start_agent(servers, "--uri", "qemu+tcp://127.0.0.1:1/system", "--host-id", "kvm-unreachable")
    assert process.stderr is not None
    seen: list[dict[str, Any]] = []
    refused = await asyncio.wait_for(read_until(process.stderr, "libvirt agent did not start", seen), 30)

    assert await asyncio.wait_for(process.wait(), 15) == 1
    assert "127.0.0.1" in refused["error"]


def test_without_uri_and_host_id_it_says_which_setting_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    from vmsched_agent.cli import main

    assert main(["libvirt"]) == 2
    assert capsys.readouterr().err.strip() == (
        "vmsched-agent libvirt: invalid configuration: --uri or VMSCHED_LIBVIRT_URI: required; "
        "--host-id or VMSCHED_LIBVIRT_HOST_ID: required"
    )


def test_credentials_without_the_hosts_line_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vmsched_agent.cli import main

    credentials = tmp_path / "credentials.jsonl"
    credentials.write_text(
        '{"host_id":"hv-0002","username":"agent-hv-0002","password":"x","amqp_url":"amqp://agent-hv-0002:x@h/"}\n'
    )

    status = main(["libvirt", "--uri", "test:///default", "--host-id", "hv-0001", "--credentials", str(credentials)])

    assert status == 2
    assert "no credentials for host hv-0001" in capsys.readouterr().err
