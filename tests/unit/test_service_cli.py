"""First contact with a service's command line: --help describes it and starts nothing; a service that
cannot start says why in one line and exits non-zero, without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SERVICES = ["vmsched-api", "vmsched-scheduler", "vmsched-gateway"]
BIN = Path(sys.executable).parent
# A port nothing listens on: connecting is refused at once.
CLOSED = "127.0.0.1:1"


def run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / script), *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("script", SERVICES)
def test_help_describes_the_service_and_its_settings_and_starts_nothing(script: str) -> None:
    result = run(script, "--help", VMSCHED_AMQP_URL=f"amqp://guest:guest@{CLOSED}/")
    assert result.returncode == 0, result.stderr
    assert f"Usage: {script}" in result.stdout
    assert "VMSCHED_AMQP_URL" in result.stdout
    assert "VMSCHED_DATABASE_URL" in result.stdout
    assert result.stderr == ""  # nothing tried to connect to the closed port


@pytest.mark.parametrize("script", SERVICES)
def test_a_server_that_does_not_answer_is_named_in_one_line_without_the_password(script: str) -> None:
    result = run(script, VMSCHED_AMQP_URL=f"amqp://vmsched:s3cret@{CLOSED}/")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{script}: cannot reach RabbitMQ at amqp://vmsched:***@{CLOSED}/ (VMSCHED_AMQP_URL): ")
    assert "s3cret" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_a_scheduler_without_its_database_is_told_that_the_api_creates_it() -> None:
    result = run(
        "vmsched-scheduler", VMSCHED_DATABASE_URL="postgresql+asyncpg://postgres@127.0.0.1:5432/vmsched_never_made"
    )
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "cannot reach PostgreSQL" in line
    assert "(VMSCHED_DATABASE_URL)" in line
    assert "start the API first" in line


@pytest.mark.parametrize("module", ["vmsched_api", "vmsched_scheduler", "vmsched_gateway"])
def test_each_service_runs_as_python_dash_m(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"}
    )
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout


def test_the_gateway_offers_to_enroll_agents() -> None:
    result = run("vmsched-gateway", "--help")
    assert result.returncode == 0, result.stderr
    assert "enroll-agent" in result.stdout
    result = run("vmsched-gateway", "enroll-agent", "--help")
    assert result.returncode == 0, result.stderr
    assert "VMSCHED_AMQP_ADMIN_URL" in result.stdout


def test_enrolling_a_name_that_is_no_host_id_stops_with_one_line() -> None:
    result = run("vmsched-gateway", "enroll-agent", "hv-1", "not a host")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "vmsched-gateway: not a host id: 'not a host' (letters, digits, '_', '.', '-'; starting with a letter or digit)"
    ]
    assert result.stdout == ""  # nobody enrolled: the names are checked first


def test_enrolling_without_a_management_api_says_where_it_looked_in_one_line_without_the_password() -> None:
    result = run("vmsched-gateway", "enroll-agent", "hv-1", VMSCHED_AMQP_ADMIN_URL=f"http://vmsched:s3cret@{CLOSED}/")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"vmsched-gateway: cannot reach RabbitMQ's management API at http://{CLOSED}/api")
    assert "rabbitmq-plugins enable rabbitmq_management" in line
    assert "s3cret" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
