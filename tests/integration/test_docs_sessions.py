"""The README's first session and docs/walkthrough.md, each run as a newcomer runs it: every
```` ```bash ```` block in order, in one shell, against a stack started as ``make run`` starts it
(its three simulated hosts hv-0001 to hv-0003, its admin token in ``.run/dev-token``), on servers of
its own, so that nothing another test left behind changes an answer. A command that fails, or a
curl answered with an HTTP error, fails the test (devtools/docs_session.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from devtools.docs_session import Where, run_pages, shell_blocks
from devtools.run import start_fleet
from devtools.stack import ROOT, Stack, free_port
from tests.servers import Servers, provide_servers

README = ROOT / "README.md"
WALKTHROUGH = ROOT / "docs" / "walkthrough.md"
# Each session takes 10 to 25 s on an idle machine; the bound is for a loaded one.
SESSION_TIMEOUT = 90.0
# The CLI page runs the vmsched command about sixty times, a second or two each.
PAGE_TIMEOUT = 400.0


@pytest.fixture(scope="module")
def docs_servers() -> Iterator[Servers]:
    """Servers of this module's own: the sessions run as on a fresh ``make run``."""
    with provide_servers() as servers:
        yield servers


@pytest.fixture(scope="module")
def make_run(docs_servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """What ``make run`` starts: the services and its simulated fleet, with an admin token."""
    logs = tmp_path_factory.mktemp("make-run-logs")
    stack = Stack(env=docs_servers.env(), log_dir=logs, api_port=free_port())
    with stack.running(schedulers=1):
        start_fleet(stack, 3, logs / "agent-credentials.jsonl")
        yield stack


def _host_and_port(url: str | None) -> str:
    assert url is not None
    return urlsplit(url).netloc


def test_the_readme_shows_a_session_to_run() -> None:
    blocks = shell_blocks(README)
    assert len(blocks) >= 2, "the README's curl session and its CLI session"
    assert any("curl" in block for block in blocks)
    assert any("vmsched " in block for block in blocks)


def run_as_a_reader(stack: Stack, page: Path, home: Path, timeout: float = SESSION_TIMEOUT) -> str:
    """Run the page's session in ``home``, a stand-in for the checkout the reader is in: make run's
    token where make run keeps it, the virtualenv the CLI session activates; its output."""
    (home / ".run").mkdir()
    (home / ".run" / "dev-token").write_text(stack.token + "\n")
    (home / ".venv").symlink_to(ROOT / ".venv")
    where = Where(
        api=_host_and_port(stack.api_url),
        scheduler_metrics=_host_and_port(stack.services["scheduler-1"].metrics_url),
        gateway_metrics=_host_and_port(stack.services["gateway"].metrics_url),
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith(("VMSCHED_", "VIRTUAL_ENV"))}
    # The CLI's default URL is make run's 127.0.0.1:8000; this stack listens elsewhere. A home of
    # its own: no config file of the machine's user is read.
    env.update(VMSCHED_URL=stack.api_url, HOME=str(home))

    done = run_pages([page], where, home, env, timeout)

    assert done.returncode == 0, done.stdout[-6000:]
    return done.stdout


def test_the_readmes_session_runs_in_order_on_make_runs_fleet(make_run: Stack, tmp_path: Path) -> None:
    output = run_as_a_reader(make_run, README, tmp_path)
    # It did talk to the stack: the VM it asked for was placed, and the one too big was refused.
    assert "placed on hv-" in output
    assert "exit 7" in output


def test_the_walkthrough_runs_in_order_on_make_runs_fleet_and_leaves_it_as_it_was(
    make_run: Stack, tmp_path: Path
) -> None:
    output = run_as_a_reader(make_run, WALKTHROUGH, tmp_path)
    assert '"name":"gold-1","status":"running"' in output  # the operator's overcommit made its room
    assert output.rstrip().endswith('{"items":[],"next_cursor":null}'), output[-2000:]
    with make_run.client() as api:
        hosts = {host["id"]: host for host in api.get("/v1/hosts").json()}
        assert api.get("/v1/settings/scheduler").json()["default_strategy"] == "least_loaded"
    assert sorted(hosts) == ["hv-0001", "hv-0002", "hv-0003"]
    for host in hosts.values():
        assert host["operator_labels"] == {}, host
        assert host["operator_taints"] is None, host
        assert host["operator_overcommit"] == {"cpu": None, "memory": None, "disk": None}, host
        assert host["scheduling_paused"] is False, host
        assert host["status"] == "online", host


@pytest.mark.slow
@pytest.mark.parametrize("page", ["cli.md", "operations.md", "placement.md", "whatif.md"])
def test_the_operators_pages_run_in_order_on_make_runs_fleet_and_leave_it_as_it_was(
    make_run: Stack, tmp_path: Path, page: str
) -> None:
    # Each page on its own (each defines what it uses); the CLI's alone takes about two minutes.
    run_as_a_reader(make_run, ROOT / "docs" / page, tmp_path, PAGE_TIMEOUT)
    with make_run.client() as api:
        running = api.get("/v1/vms", params={"status": "running"}).json()["items"]
        hosts = api.get("/v1/hosts").json()
    assert running == [], [vm["name"] for vm in running]
    assert sorted(host["id"] for host in hosts) == ["hv-0001", "hv-0002", "hv-0003"]
    for host in hosts:
        assert host["operator_labels"] == {}, host
        assert host["operator_taints"] is None, host
        assert host["scheduling_paused"] is False, host
