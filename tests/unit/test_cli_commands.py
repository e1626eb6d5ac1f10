"""The vmsched CLI's command line, without a server: options are options, every command takes
-o, and what the client refuses before sending exits 2 in one line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from vmsched_client.cli.app import app
from vmsched_client.cli.exit_codes import ExitCode
from vmsched_client.cli.options import volumes

COMMANDS = [
    ["vms", "create"],
    ["vms", "list"],
    ["vms", "show"],
    ["vms", "why"],
    ["vms", "delete"],
    ["hosts", "list"],
    ["hosts", "show"],
    ["hosts", "info"],
    ["hosts", "cordon"],
    ["hosts", "uncordon"],
    ["hosts", "fence"],
    ["hosts", "unfence"],
    ["hosts", "delete"],
    ["groups", "list"],
    ["groups", "show"],
    ["groups", "create"],
    ["groups", "delete"],
    ["pools", "list"],
    ["pools", "show"],
    ["pools", "set"],
    ["pools", "delete"],
    ["reservations", "list"],
    ["reservations", "show"],
    ["reservations", "create"],
    ["reservations", "delete"],
    ["projects", "list"],
    ["projects", "show"],
    ["projects", "create"],
    ["tokens", "list"],
    ["tokens", "show"],
    ["tokens", "create"],
    ["tokens", "revoke"],
    ["strategy", "show"],
    ["strategy", "set"],
    ["rebalance", "plan"],
    ["rebalance", "list"],
    ["rebalance", "show"],
    ["rebalance", "apply"],
    ["replay"],
    ["events"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_takes_the_output_option(command: list[str]) -> None:
    shown = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.stderr
    assert "-o, --output" in shown.stdout


@pytest.mark.parametrize(
    ("command", "options"),
    [
        (["groups", "create"], ["--policy", "--topology-key", "--max-per-domain", "--max-skew"]),
        (["tokens", "create"], ["--project", "-s, --scope", "--expires-at"]),
        (["vms", "create"], ["--cpu", "-l, --label", "--volume", "--wait", "--count", "--timeout", "--reservation"]),
        (["pools", "set"], ["--capacity-gb", "-t, --tag"]),
        (["reservations", "create"], ["--cpu", "--memory-mb", "--count", "-l, --label", "--ends-at"]),
        (["rebalance", "plan"], ["--goal", "--max-moves", "-l, --label", "--apply", "--max-parallel", "--wait"]),
        (["rebalance", "apply"], ["--max-parallel", "--wait", "--timeout"]),
        (["rebalance", "list"], ["--limit"]),
        (["replay"], ["--strategy"]),
    ],
)
def test_options_are_options(command: list[str], options: list[str]) -> None:
    shown = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).stdout
    for option in options:
        assert option in shown


def test_a_request_the_models_refuse_is_not_sent_and_exits_2() -> None:
    # Port 9 (discard) answers nothing: a request sent would exit 6, not 2.
    refused = CliRunner().invoke(app, ["--url", "http://127.0.0.1:9", "vms", "create", "bad name!", "--disk-gb", "1"])
    assert refused.exit_code == ExitCode.USAGE
    assert refused.stderr.startswith("vmsched: name: ")
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_reservation_the_models_refuse_is_not_sent_and_exits_2() -> None:
    args = ["--url", "http://127.0.0.1:9", "reservations", "create", "shop", "--cpu", "1", "--memory-mb", "1"]
    refused = CliRunner().invoke(app, [*args, "--count", "0"])
    assert refused.exit_code == ExitCode.USAGE
    assert refused.stderr.startswith("vmsched: count: ")
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_rebalance_plan_the_models_refuse_is_not_sent_and_exits_2() -> None:
    args = ["--url", "http://127.0.0.1:9", "rebalance", "plan", "--goal", "spread"]
    refused = CliRunner().invoke(app, [*args, "--max-moves", "0"])
    assert refused.exit_code == ExitCode.USAGE
    assert refused.stderr.startswith("vmsched: max_moves: ")
    assert len(refused.stderr.strip().splitlines()) == 1


def test_an_unknown_goal_is_a_usage_error() -> None:
    refused = CliRunner().invoke(app, ["--url", "http://127.0.0.1:9", "rebalance", "plan", "--goal", "sideways"])
    assert refused.exit_code == ExitCode.USAGE


def test_a_volume_that_is_not_gb_and_tags_is_a_usage_error() -> None:
    refused = CliRunner().invoke(app, ["--url", "http://127.0.0.1:9", "vms", "create", "v", "--volume", "big:ssd"])
    assert refused.exit_code == ExitCode.USAGE
    assert "--volume" in refused.stderr


def test_a_pool_the_models_refuse_is_not_sent_and_exits_2() -> None:
    refused = CliRunner().invoke(
        app, ["--url", "http://127.0.0.1:9", "pools", "set", "nfs", "--capacity-gb", "1", "-t", "a b"]
    )
    assert refused.exit_code == ExitCode.USAGE
    assert refused.stderr.startswith("vmsched: tags.0: ")


def test_volumes_are_read_as_gb_then_tags() -> None:
    assert volumes(["30:ssd,fast", "5"]) == [{"size_gb": 30, "tags": ["ssd", "fast"]}, {"size_gb": 5, "tags": []}]
