"""Settings: defaults from design.md, and a bad value stops the service with one clear line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vmsched_contract.strategy import Strategy
from vmsched_runtime.settings import AgentAuth, Settings, load_settings


def test_defaults_are_the_documented_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "VMSCHED_AMQP_URL",
        "VMSCHED_REDIS_URL",
        "VMSCHED_DATABASE_URL",
        "VMSCHED_SCHEDULING_STRATEGY",
        "VMSCHED_AGENT_OFFLINE_TIMEOUT",
        "VMSCHED_DEFAULT_VM_CPU",
        "VMSCHED_DEFAULT_VM_MEMORY_MB",
        "VMSCHED_DEFAULT_WAIT_S",
    ):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert str(settings.amqp_url) == "amqp://guest:guest@127.0.0.1:5672/"
    assert str(settings.redis_url) == "redis://127.0.0.1:6379/0"
    assert str(settings.database_url) == "postgresql+asyncpg://postgres@127.0.0.1:5432/vmsched"
    assert settings.scheduling_strategy is Strategy.LEAST_LOADED
    assert settings.agent_offline_timeout == 15.0
    assert (settings.api_host, settings.api_port) == ("127.0.0.1", 8000)
    assert (settings.default_vm_cpu, settings.default_vm_memory_mb) == (4, 8192)  # Orchard's (seed 002)
    assert settings.default_wait_s == 0  # a VM that fits nowhere fails at once (seed 001)


def test_unknown_strategy_stops_with_the_list_of_valid_ones(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VMSCHED_SCHEDULING_STRATEGY", "fastest")
    with pytest.raises(SystemExit) as stopped:
        load_settings("vmsched-scheduler")
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "VMSCHED_SCHEDULING_STRATEGY" in err
    assert (
        "least_loaded, best_fit, round_robin, random, least_utilized, first_fit, fewest_vms, most_vms, "
        "user_concentrated" in err
    )


def test_each_bad_value_is_named(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VMSCHED_AGENT_OFFLINE_TIMEOUT", "-3")
    monkeypatch.setenv("VMSCHED_API_PORT", "seventy")
    with pytest.raises(SystemExit):
        load_settings("vmsched-api")
    err = capsys.readouterr().err
    assert "VMSCHED_AGENT_OFFLINE_TIMEOUT" in err
    assert "VMSCHED_API_PORT" in err


@pytest.mark.parametrize("script", ["vmsched-api", "vmsched-scheduler", "vmsched-gateway"])
def test_a_service_with_a_bad_setting_exits_at_start_with_one_line(script: str) -> None:
    bin_dir = __import__("pathlib").Path(sys.executable).parent
    result = subprocess.run(
        [str(bin_dir / script)],
        env={"VMSCHED_SCHEDULING_STRATEGY": "nope", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"{script}: invalid configuration: VMSCHED_SCHEDULING_STRATEGY: unknown strategy 'nope'; "
        "valid strategies: least_loaded, best_fit, round_robin, random, least_utilized, first_fit, fewest_vms, "
        "most_vms, user_concentrated"
    ]


def test_agents_must_be_enrolled_unless_the_lab_is_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VMSCHED_AGENT_AUTH", raising=False)
    assert Settings().agent_auth is AgentAuth.REQUIRED
    assert Settings.from_environment({"VMSCHED_AGENT_AUTH": "off"}).agent_auth is AgentAuth.OFF


def test_an_unknown_agent_auth_stops_the_service_naming_the_choices(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VMSCHED_AGENT_AUTH", "maybe")
    with pytest.raises(SystemExit):
        load_settings("vmsched-gateway")
    err = capsys.readouterr().err
    assert "VMSCHED_AGENT_AUTH" in err
    assert "'required' or 'off'" in err


@pytest.mark.parametrize(
    ("amqp_url", "management_url"),
    [
        ("amqp://guest:guest@127.0.0.1:5672/", "http://guest:guest@127.0.0.1:15672/"),
        ("amqp://vmsched:s3cret@rabbit-a:5672,rabbit-b:5672/prod", "http://vmsched:s3cret@rabbit-a:15672/"),
        ("amqps://vmsched:s3cret@rabbit.example:5671/", "https://vmsched:s3cret@rabbit.example:15671/"),
    ],
)
def test_the_management_api_is_found_beside_the_first_broker_node(amqp_url: str, management_url: str) -> None:
    settings = Settings.from_environment({"VMSCHED_AMQP_URL": amqp_url})
    assert settings.amqp_admin_url is None
    assert settings.management_url == management_url


def test_an_explicit_management_url_wins() -> None:
    settings = Settings.from_environment(
        {"VMSCHED_AMQP_URL": "amqp://u:p@rabbit:5672/", "VMSCHED_AMQP_ADMIN_URL": "https://admin:pw@mgmt.example/rmq/"}
    )
    assert settings.management_url == "https://admin:pw@mgmt.example/rmq/"


def test_a_migration_timeout_shorter_than_a_resend_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert Settings().migration_timeout == 600.0
    monkeypatch.setenv("VMSCHED_MIGRATION_TIMEOUT", "60")
    monkeypatch.setenv("VMSCHED_RESEND_STALE_AFTER", "120")
    with pytest.raises(SystemExit):
        load_settings("vmsched-gateway")
    err = capsys.readouterr().err
    assert "VMSCHED_MIGRATION_TIMEOUT (60) must be longer than VMSCHED_RESEND_STALE_AFTER (120)" in err


def test_the_usage_refresh_interval_is_30_s_by_default_0_or_more(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert Settings.from_environment({}).usage_refresh_interval == 30.0
    assert Settings.from_environment({"VMSCHED_USAGE_REFRESH_INTERVAL": "0"}).usage_refresh_interval == 0.0
    monkeypatch.setenv("VMSCHED_USAGE_REFRESH_INTERVAL", "-1")
    with pytest.raises(SystemExit):
        load_settings("vmsched-scheduler")
    assert "VMSCHED_USAGE_REFRESH_INTERVAL" in capsys.readouterr().err


def test_seed_strategy_name_is_read_when_the_prefixed_one_is_unset_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VMSCHED_SCHEDULING_STRATEGY", raising=False)
    monkeypatch.setenv("SCHEDULING_STRATEGY", "best_fit")
    settings = load_settings("vmsched-scheduler")
    assert settings.scheduling_strategy is Strategy.BEST_FIT
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "vmsched-scheduler: warning: SCHEDULING_STRATEGY (seed 001's name) is read because "
        "VMSCHED_SCHEDULING_STRATEGY is unset; rename it to VMSCHED_SCHEDULING_STRATEGY"
    ]
    assert Settings.from_environment({"SCHEDULING_STRATEGY": "random"}).scheduling_strategy is Strategy.RANDOM


def test_the_prefixed_strategy_wins_over_the_seed_name_silently(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VMSCHED_SCHEDULING_STRATEGY", "round_robin")
    monkeypatch.setenv("SCHEDULING_STRATEGY", "best_fit")
    assert load_settings("vmsched-api").scheduling_strategy is Strategy.ROUND_ROBIN
    assert capsys.readouterr().err == ""
    both = {"VMSCHED_SCHEDULING_STRATEGY": "round_robin", "SCHEDULING_STRATEGY": "best_fit"}
    assert Settings.from_environment(both).scheduling_strategy is Strategy.ROUND_ROBIN


def test_a_bad_seed_strategy_is_named_by_the_seed_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VMSCHED_SCHEDULING_STRATEGY", raising=False)
    monkeypatch.setenv("SCHEDULING_STRATEGY", "fastest")
    with pytest.raises(SystemExit) as stopped:
        load_settings("vmsched-scheduler")
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(
        "vmsched-scheduler: invalid configuration: SCHEDULING_STRATEGY: unknown strategy 'fastest'"
    )
