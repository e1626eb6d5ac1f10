"""The vmsched CLI against the real stack, through Typer's runner (and once as a real process):
tables by default, JSON with -o json, one-line errors with their documented exit codes."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import pty
import re
import struct
import subprocess
import termios
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from devtools.stack import BIN, Stack, wait_for
from tests.integration.client.conftest import Fleet
from vmsched_client import Client
from vmsched_client.cli.app import app
from vmsched_client.cli.exit_codes import ExitCode
from vmsched_contract.status import VmStatus


@pytest.fixture
def vmsched(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Wide enough that no table column is cut; no config file but the environment's.
    environ = {
        "VMSCHED_URL": stack.api_url,
        "VMSCHED_TOKEN": stack.token,
        "COLUMNS": "250",
        "XDG_CONFIG_HOME": str(tmp_path_factory.mktemp("config")),
    }

    def run(*args: str, code: ExitCode = ExitCode.OK) -> Result:
        result = CliRunner().invoke(app, list(args), env=environ)
        assert result.exit_code == code, f"{args}: {result.exit_code}\n{result.stdout}\n{result.stderr}"
        return result

    return run


def vm_args(name: str, fleet: Fleet, *more: str) -> list[str]:
    return [name, "--cpu", "1", "--memory-mb", "256", "--disk-gb", "1", "--label", f"suite={fleet.suite}", *more]


def test_vms_are_created_waited_for_listed_explained_and_deleted(vmsched: Any, fleet: Fleet) -> None:
    created = json.loads(vmsched("-o", "json", "vms", "create", *vm_args(f"{fleet.suite}-c1", fleet, "--wait")).stdout)
    (vm,) = created
    assert vm["status"] in ("scheduled", "running")
    host = vm["hypervisor_id"]
    assert host in fleet.hosts

    listed = json.loads(vmsched("-o", "json", "vms", "list", "--host", host).stdout)
    assert vm["id"] in [v["id"] for v in listed]
    table = vmsched("vms", "list", "--host", host).stdout
    assert "STATUS" in table
    assert f"{fleet.suite}-c1" in table
    assert host in vmsched("vms", "show", vm["id"]).stdout

    why = vmsched("vms", "why", vm["id"]).stdout.splitlines()
    assert why[0].startswith(f"VM {fleet.suite}-c1 ({vm['id']})")
    assert why[1].startswith(f"placed on {host} (")
    assert any(line.startswith("considered ") for line in why)
    assert json.loads(vmsched("-o", "json", "vms", "why", vm["id"]).stdout)["decision"]["host"] == host

    batch = json.loads(
        vmsched("-o", "json", "vms", "create", *vm_args(f"{fleet.suite}-b", fleet, "--count", "3", "--wait")).stdout
    )
    assert [v["name"] for v in batch] == [f"{fleet.suite}-b-{n}" for n in (1, 2, 3)]
    assert {v["status"] for v in batch} <= {"scheduled", "running"}

    for each in [vm, *batch]:
        deleted = json.loads(vmsched("-o", "json", "vms", "delete", each["id"], "--wait").stdout)
        assert deleted["status"] == "deleted"


def test_an_unplaced_vm_exits_7_and_why_groups_the_rejections(vmsched: Any, fleet: Fleet) -> None:
    args = vm_args(f"{fleet.suite}-huge", fleet, "--wait", "--wait-s", "0")
    args[2] = "1024"  # --cpu: more than any host has
    failed = vmsched("-o", "json", "vms", "create", *args, code=ExitCode.NOT_PLACED)
    assert "not placed" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    (vm,) = json.loads(failed.stdout)
    why = vmsched("vms", "why", vm["id"]).stdout
    assert "no host: " in why
    assert "rejected " in why


def test_errors_are_one_line_with_their_exit_code(vmsched: Any, stack: Stack) -> None:
    missing = vmsched("vms", "show", str(uuid.uuid4()), code=ExitCode.NOT_FOUND)
    assert missing.stderr.startswith("vmsched: ")
    assert len(missing.stderr.strip().splitlines()) == 1
    vmsched("vms", "show", "not-a-uuid", code=ExitCode.USAGE)
    vmsched("vms", "create", "bad name!", "--disk-gb", "1", code=ExitCode.USAGE)
    denied = vmsched("--token", "wrong", "vms", "list", code=ExitCode.DENIED)
    assert len(denied.stderr.strip().splitlines()) == 1
    unreachable = vmsched("--url", "http://127.0.0.1:9", "hosts", "list", code=ExitCode.UNREACHABLE)
    assert "cannot reach http://127.0.0.1:9" in unreachable.stderr


def test_hosts_are_listed_cordoned_uncordoned_and_explained(vmsched: Any, fleet: Fleet) -> None:
    first = fleet.hosts[0]
    hosts = json.loads(vmsched("-o", "json", "hosts", "list").stdout)
    assert set(fleet.hosts) <= {h["id"] for h in hosts}
    assert first in vmsched("hosts", "list").stdout
    assert json.loads(vmsched("-o", "json", "hosts", "cordon", first).stdout)["scheduling_paused"] is True
    assert json.loads(vmsched("-o", "json", "hosts", "show", first).stdout)["scheduling_paused"] is True
    assert json.loads(vmsched("-o", "json", "hosts", "uncordon", first).stdout)["scheduling_paused"] is False
    assert first in vmsched("hosts", "info", first).stdout
    vmsched("hosts", "delete", f"{fleet.suite}-nosuch", code=ExitCode.NOT_FOUND)
    vmsched("hosts", "fence", f"{fleet.suite}-nosuch", code=ExitCode.NOT_FOUND)
    vmsched("hosts", "unfence", first, code=ExitCode.CONFLICT)  # not fenced

    (vm,) = json.loads(vmsched("-o", "json", "vms", "create", *vm_args(f"{fleet.suite}-h", fleet, "--wait")).stdout)
    occupied = vmsched("hosts", "delete", vm["hypervisor_id"], code=ExitCode.CONFLICT)
    assert vm["id"] in occupied.stderr
    vmsched("vms", "delete", vm["id"])


def test_groups_projects_tokens_and_the_strategy(vmsched: Any, fleet: Fleet) -> None:
    group = json.loads(
        vmsched("-o", "json", "groups", "create", f"{fleet.suite}-g", "--policy", "anti-affinity").stdout
    )
    assert f"{fleet.suite}-g" in vmsched("groups", "list").stdout
    assert json.loads(vmsched("-o", "json", "groups", "show", group["id"]).stdout)["policy"] == "anti-affinity"
    vmsched("groups", "delete", group["id"])
    vmsched("groups", "show", group["id"], code=ExitCode.NOT_FOUND)

    project = f"c{uuid.uuid4().hex[:8]}"
    vmsched("projects", "create", project, "--instances", "2", "--cpu", "8")
    table = vmsched("projects", "list").stdout
    assert any(line.split()[:2] == [project, "0/2"] for line in table.splitlines())
    assert json.loads(vmsched("-o", "json", "projects", "show", project).stdout)["quota"]["cpu"] == 8
    vmsched("projects", "create", project, code=ExitCode.CONFLICT)

    token = json.loads(
        vmsched(
            "-o", "json", "tokens", "create", "ops", "--project", project, "-s", "vms:read", "-s", "vms:write"
        ).stdout
    )
    assert token["token"]
    assert token["id"] in vmsched("tokens", "list", "--project", project).stdout
    assert json.loads(vmsched("-o", "json", "--token", token["token"], "vms", "list").stdout) == []
    assert json.loads(vmsched("-o", "json", "tokens", "show", token["id"]).stdout)["scopes"] == [
        "vms:read",
        "vms:write",
    ]
    vmsched("--token", token["token"], "hosts", "list", code=ExitCode.DENIED)  # no hosts:read
    vmsched("tokens", "revoke", token["id"])
    vmsched("--token", token["token"], "vms", "list", code=ExitCode.DENIED)

    strategy = json.loads(vmsched("-o", "json", "strategy", "show").stdout)
    assert strategy["default_strategy"] in vmsched("strategy", "show").stdout


def test_a_reservation_is_created_listed_taken_and_deleted(vmsched: Any, stack: Stack, fleet: Fleet) -> None:
    project = f"r{uuid.uuid4().hex[:8]}"
    vmsched("projects", "create", project)
    size = ["--cpu", "1", "--memory-mb", "256", "--disk-gb", "1", "--count", "2", "--label", f"suite={fleet.suite}"]
    ends_at = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    reservation = vmsched("-o", "id", "reservations", "create", project, *size, "--ends-at", ends_at).stdout.strip()
    try:
        uuid.UUID(reservation)

        def held() -> bool:
            shown = json.loads(vmsched("-o", "json", "reservations", "show", reservation).stdout)
            return bool(shown["status"] == "held")

        wait_for(held, 60, "the reservation held", interval=0.2)
        table = vmsched("reservations", "list", "--project", project).stdout
        assert table.split()[:3] == ["ID", "PROJECT", "STATUS"]
        assert any(line.split()[:6] == [reservation, project, "held", "2", "2", "0"] for line in table.splitlines())

        token = json.loads(
            vmsched(
                "-o", "json", "tokens", "create", "ops", "--project", project, "-s", "vms:read", "-s", "vms:write"
            ).stdout
        )["token"]
        mine = ["--token", token, "-o", "json"]
        (vm,) = json.loads(
            vmsched(
                *mine, "vms", "create", *vm_args(f"{fleet.suite}-r", fleet, "--reservation", reservation, "--wait")
            ).stdout
        )
        assert vm["reservation"] == reservation
        assert vm["hypervisor_id"] in fleet.hosts
        assert [r["id"] for r in json.loads(vmsched(*mine, "reservations", "list").stdout)] == [reservation]
        assert json.loads(vmsched(*mine, "reservations", "show", reservation).stdout)["used"] == 1
        vmsched("--token", token, "reservations", "delete", reservation, code=ExitCode.DENIED)  # an admin's
        vmsched(*mine, "vms", "delete", vm["id"])
    finally:
        ended = json.loads(vmsched("-o", "json", "reservations", "delete", reservation).stdout)
    assert (ended["status"], ended["held"], ended["used"]) == ("released", 0, 1)
    vmsched("reservations", "show", str(uuid.uuid4()), code=ExitCode.NOT_FOUND)


def in_a_terminal(args: list[str], env: dict[str, str], *, columns: int = 160) -> tuple[int, str]:
    """Run ``args`` with a pseudo-terminal as its standard input, output and error, as a person's
    shell runs it; returns (exit code, what the terminal showed)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {key: value for key, value in env.items() if key not in ("COLUMNS", "NO_COLOR", "TERM")}
    process = subprocess.Popen(args, stdin=terminal, stdout=terminal, stderr=terminal, env={**env, "TERM": "xterm"})
    os.close(terminal)
    shown = bytearray()
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every holder of the terminal's other end has closed it
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    return process.wait(timeout=60), shown.decode()


def test_vmsched_in_a_real_terminal_draws_tables_and_says_errors_in_one_line(stack: Stack, fleet: Fleet) -> None:
    env = {**os.environ, "VMSCHED_URL": stack.api_url, "VMSCHED_TOKEN": stack.token}
    code, shown = in_a_terminal([str(BIN / "vmsched"), "hosts", "list"], env)
    assert code == 0, shown
    assert "\x1b[" in shown  # a terminal gets rich's styles (a pipe gets none: the test below)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert plain.split()[:3] == ["ID", "STATUS", "CORDONED"], plain
    assert all(host in plain for host in fleet.hosts), plain
    code, shown = in_a_terminal([str(BIN / "vmsched"), "vms", "show", str(uuid.uuid4())], env)
    lines = [line for line in re.sub(r"\x1b\[[0-9;]*m", "", shown).splitlines() if line.strip()]
    assert (code, len(lines)) == (ExitCode.NOT_FOUND, 1), shown
    assert lines[0].startswith("vmsched: no VM "), shown


def test_a_real_vmsched_vms_list_in_a_terminal_like_process(stack: Stack, fleet: Fleet) -> None:
    env = {**os.environ, "VMSCHED_URL": stack.api_url, "VMSCHED_TOKEN": stack.token, "COLUMNS": "200"}
    shown = subprocess.run(
        [str(BIN / "vmsched"), "vms", "list", "--limit", "5"], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split()[:3] == ["ID", "NAME", "STATUS"]
    as_json = subprocess.run(
        [str(BIN / "vmsched"), "-o", "json", "vms", "list", "--limit", "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert as_json.returncode == 0, as_json.stderr
    assert len(json.loads(as_json.stdout)) <= 5


def test_a_vm_is_stopped_started_migrated_and_its_host_drained(vmsched: Any, client: Client, fleet: Fleet) -> None:
    (vm,) = json.loads(vmsched("-o", "json", "vms", "create", *vm_args(f"{fleet.suite}-m1", fleet)).stdout)
    source = client.wait_for_vm(vm["id"], until=lambda v: v.status is VmStatus.RUNNING, timeout=60).hypervisor_id
    (other,) = set(fleet.hosts) - {source}

    stopped = json.loads(vmsched("-o", "json", "vms", "stop", vm["id"], "--wait").stdout)
    assert (stopped["status"], stopped["hypervisor_id"]) == ("stopped", source)
    vmsched("vms", "stop", vm["id"], code=ExitCode.CONFLICT)  # stopped already
    assert json.loads(vmsched("-o", "json", "vms", "start", vm["id"], "--wait").stdout)["status"] == "running"

    moved = json.loads(vmsched("-o", "json", "vms", "migrate", vm["id"], "--to", other, "--wait").stdout)
    assert (moved["status"], moved["hypervisor_id"], moved["migrations"]) == ("running", other, 1)

    try:
        drained = json.loads(vmsched("-o", "json", "hosts", "drain", other, "--deadline", "60", "--wait").stdout)
        assert drained["state"] == "drained"
        assert vm["id"] in [m["vm_id"] for m in drained["moved"]]
        assert json.loads(vmsched("-o", "json", "hosts", "drain-status", other).stdout)["state"] == "drained"
    finally:
        vmsched("hosts", "undrain", other)
    assert client.get_vm(vm["id"]).hypervisor_id == source
    assert not client.get_host(other).scheduling_paused
    vmsched("vms", "delete", vm["id"])


def test_simulate_and_capacity(vmsched: Any, fleet: Fleet) -> None:
    table = vmsched("simulate", *vm_args(f"{fleet.suite}-imagined", fleet, "--count", "2")).stdout
    assert "HOST" in table
    assert any(host in table for host in fleet.hosts)
    nowhere = vmsched(
        "-o",
        "json",
        "simulate",
        *vm_args(f"{fleet.suite}-gone", fleet),
        *itertools.chain.from_iterable(("--without", host) for host in fleet.hosts),
        code=ExitCode.NOT_PLACED,
    )
    assert json.loads(nowhere.stdout)["unplaced"] == 1

    room = json.loads(vmsched("-o", "json", "capacity", "--cpu", "1", "--memory-mb", "256").stdout)
    assert set(fleet.hosts) <= {host["host"] for host in room["hosts"]}
    table = vmsched("capacity", "--cpu", "1", "--memory-mb", "256").stdout
    assert "FITS" in table
    assert "total " in table


def test_rebalance_plan_show_apply_and_replay(vmsched: Any, client: Client, fleet: Fleet) -> None:
    created = json.loads(
        vmsched("-o", "json", "vms", "create", *vm_args(f"{fleet.suite}-rb", fleet, "--count", "2")).stdout
    )
    ids = [vm["id"] for vm in created]
    for vm_id in ids:
        client.wait_for_vm(vm_id, until=lambda v: v.status is VmStatus.RUNNING, timeout=60)
    try:
        replayed = vmsched("replay", ids[0]).stdout
        assert "recorded" in replayed
        assert "same yes" in replayed
        replay = json.loads(vmsched("-o", "json", "replay", ids[0], "--strategy", "best_fit").stdout)
        assert (replay["strategy"], replay["decided_host"]) == ("best_fit", client.get_vm(ids[0]).hypervisor_id)
        # least_utilized reads measured usage, which a least_loaded decision journals only at a
        # checkpoint: the table says so whenever the answer is approximate.
        what_if = ["replay", ids[0], "--strategy", "least_utilized"]
        usage = json.loads(vmsched("-o", "json", *what_if).stdout)["usage"]
        assert ("measured usage approximate" in vmsched(*what_if).stdout) == (usage == "approximate")

        # Both VMs on one host: a spread plan moves one of them to the other.
        crowded = fleet.hosts[0]
        for vm_id in ids:
            if client.get_vm(vm_id).hypervisor_id != crowded:
                vmsched("vms", "migrate", vm_id, "--to", crowded, "--wait")
        # A migration's source gives its room back once its agent cleaned up, a moment after the VM
        # runs on its target: until then both hosts look as full, and a spread plan moves nothing.
        other = fleet.hosts[1]
        wait_for(lambda: client.get_host(other).allocated.cpu == 0, 30, f"{other} empty", interval=0.2)
        label = ("--label", f"suite={fleet.suite}")
        plan = json.loads(vmsched("-o", "json", "rebalance", "plan", "--goal", "spread", *label).stdout)
        assert (plan["goal"], plan["state"]) == ("spread", "planned")
        assert plan["moves"]
        assert all(m["from"] == crowded and m["state"] == "queued" for m in plan["moves"])
        shown = vmsched("rebalance", "show", plan["id"]).stdout
        assert plan["id"] in shown
        assert "FROM" in shown
        done = json.loads(
            vmsched("-o", "json", "rebalance", "apply", plan["id"], "--max-parallel", "1", "--wait").stdout
        )
        assert (done["state"], done["max_parallel"]) == ("done", 1)
        assert {m["state"] for m in done["moves"]} <= {"moved", "skipped"}
        vmsched("rebalance", "apply", plan["id"], code=ExitCode.CONFLICT)  # applied already
        listed = vmsched("rebalance", "list", "--limit", "5").stdout
        assert "DONE" in listed.splitlines()[0]
        row = next(line for line in listed.splitlines() if plan["id"] in line)
        moves = len(done["moves"])
        assert row.split()[1:3] == ["spread", "done"]
        assert f"{moves}/{moves}" in row.split()  # every move made or skipped
        newest = json.loads(vmsched("-o", "json", "rebalance", "list", "--limit", "1").stdout)
        assert [p["id"] for p in newest] == [plan["id"]]

        packed = vmsched("rebalance", "plan", "--goal", "pack", "--max-moves", "1", *label, "--apply", "--wait").stdout
        assert "pack  done" in packed
        vmsched("rebalance", "show", str(uuid.uuid4()), code=ExitCode.NOT_FOUND)
        plan_id = vmsched("rebalance", "plan", "--goal", "spread", *label, "-o", "id").stdout.strip()
        assert json.loads(vmsched("-o", "json", "rebalance", "show", plan_id).stdout)["id"] == plan_id
    finally:
        for vm_id in ids:
            client.delete_vm(vm_id)
