"""Where the client finds its URL and token: arguments, then the environment, then the config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmsched_client import ClientConfig, ConfigError
from vmsched_client.errors import describe


def write(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "vmsched").mkdir()
    (tmp_path / "vmsched" / "config.toml").write_text(text)
    return {"XDG_CONFIG_HOME": str(tmp_path)}


def test_the_config_file_is_read_when_the_environment_says_nothing(tmp_path: Path) -> None:
    environ = write(tmp_path, 'url = "http://api.example:8000/"\ntoken = "from-file"\n')
    assert ClientConfig.load(environ=environ) == ClientConfig("http://api.example:8000", "from-file")


def test_the_environment_beats_the_file_and_arguments_beat_both(tmp_path: Path) -> None:
    environ = write(tmp_path, 'url = "http://file"\ntoken = "from-file"\n')
    environ |= {"VMSCHED_TOKEN": "from-env", "VMSCHED_URL": "http://env"}
    assert ClientConfig.load(environ=environ) == ClientConfig("http://env", "from-env")
    assert ClientConfig.load("http://arg", "from-arg", environ=environ) == ClientConfig("http://arg", "from-arg")


def test_without_any_the_local_api_and_no_token(tmp_path: Path) -> None:
    assert ClientConfig.load(environ={"HOME": str(tmp_path)}) == ClientConfig("http://127.0.0.1:8000", None)


def test_a_broken_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        ClientConfig.load(environ=write(tmp_path, "url = "))
    (tmp_path / "other.toml").write_text('url = "x"\npassword = "y"\n')
    with pytest.raises(ConfigError, match="unknown key"):
        ClientConfig.load(environ={"VMSCHED_CONFIG": str(tmp_path / "other.toml")})


def test_the_token_never_shows_in_the_repr() -> None:
    assert "secret" not in repr(ClientConfig("http://x", "secret"))


def test_a_refusal_reads_as_one_line() -> None:
    assert describe({"detail": "no such VM"}) == "no such VM"
    problems = {"detail": [{"loc": ["body", "cpu"], "msg": "must be >= 1"}, {"loc": ["query", "limit"], "msg": "bad"}]}
    assert describe(problems) == "cpu: must be >= 1; query.limit: bad"
    quota = {"reason": "quota_exceeded", "resource": "cpu", "limit": 4, "used": 3, "requested": 2}
    assert describe(quota) == "quota exceeded: cpu limit 4, used 3, requested 2"
