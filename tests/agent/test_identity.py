"""What an agent says about itself on the broker: the user it publishes as (AMQP ``user_id``), the
run of the process (``instance_id``), and its goodbye (``leaving``); and the credentials it reads."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.agent.conftest import MakeAgent
from tests.agent.standin import StandInGateway
from tests.fleets import enroll
from tests.servers import Servers
from vmsched_agent import parse_credentials
from vmsched_agent.cli import main
from vmsched_contract.messages import AgentCommand, CommandAction, HostStatus, ReportedStatus, Resources

CREDENTIALS = {"host_id": "hv-1", "username": "agent-hv-1", "password": "pw", "amqp_url": "amqp://agent-hv-1:pw@h/"}


def create() -> AgentCommand:
    resources = Resources(cpu=1, memory_mb=512, disk_gb=10)
    return AgentCommand(action=CommandAction.CREATE, vm_id=uuid.uuid4(), name="vm", resources=resources)


async def test_an_enrolled_agent_publishes_its_heartbeats_and_reports_as_its_own_user(
    make_agent: MakeAgent, gateway: StandInGateway, servers: Servers, host_id: str
) -> None:
    credentials = (await enroll(servers, [host_id]))[host_id]
    await make_agent(host_id, amqp_url=credentials.amqp_url).start()
    command = create()
    await gateway.send(host_id, command)

    received = await gateway.status(command.vm_id, ReportedStatus.RUNNING)

    assert received.user_id == credentials.username
    assert gateway.heartbeat_users[host_id] == {credentials.username}


async def test_agents_sharing_a_connection_publish_as_its_user(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    await make_agent(host_id).start()  # the test broker's URL: the services' user
    command = create()
    await gateway.send(host_id, command)

    assert (await gateway.status(command.vm_id, ReportedStatus.RUNNING)).user_id == "guest"
    assert gateway.heartbeat_users[host_id] == {"guest"}


async def test_each_agent_names_its_run_and_its_last_heartbeat_gives_the_host_up(
    make_agent: MakeAgent, gateway: StandInGateway, host_id: str
) -> None:
    agent = make_agent(host_id, heartbeat_interval=600.0)  # only the first and the last heartbeat
    assert agent.instance_id != make_agent(host_id).instance_id  # a new process, a new run
    await agent.start()
    first = await gateway.heartbeat(host_id)
    assert (first.instance_id, first.leaving) == (agent.instance_id, False)
    mark = len(gateway.heartbeats)

    await agent.stop()

    last = await gateway.heartbeat(host_id, after=mark)
    assert (last.instance_id, last.leaving, last.status) == (agent.instance_id, True, HostStatus.DRAINING)


def test_credentials_are_read_as_enroll_agent_prints_them_or_as_an_array() -> None:
    second = {**CREDENTIALS, "host_id": "hv-2", "username": "agent-hv-2"}
    lines = json.dumps(CREDENTIALS) + "\n\n" + json.dumps(second) + "\n"

    read = parse_credentials(lines)

    assert list(read) == ["hv-1", "hv-2"]
    assert read["hv-2"].username == "agent-hv-2"
    assert parse_credentials(json.dumps([CREDENTIALS, second])) == read
    assert "pw" not in repr(read["hv-1"])  # a secret stays out of logs


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (json.dumps(CREDENTIALS) + "\n" + json.dumps(CREDENTIALS), "host hv-1 given twice"),
        ('{"host_id": "hv-1"}', "credentials line 1: Field required"),
        ("not json", "credentials line 1: Expecting value"),
        (json.dumps({**CREDENTIALS, "host_id": "not a host"}), "credentials line 1: String should match pattern"),
    ],
)
def test_bad_credentials_are_refused_naming_the_line(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_credentials(text)


def test_the_simulator_refuses_to_start_a_host_without_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "credentials.jsonl"
    path.write_text(json.dumps({**CREDENTIALS, "host_id": "lab-0001"}) + "\n")

    assert main(["simulate", "--count", "2", "--prefix", "lab", "--credentials", str(path)]) == 2
    assert main(["simulate", "--count", "1", "--credentials", str(tmp_path / "missing")]) == 2

    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == (
        "vmsched-agent: no credentials for host lab-0002 (1 of 2 hosts without; "
        "vmsched-gateway enroll-agent lab-0002 makes them)"
    )
    assert lines[1].startswith("vmsched-agent: bad credentials: [Errno 2]")
