"""Where the client finds the API and its token: arguments, else the environment, else a file.

- ``VMSCHED_URL`` and ``VMSCHED_TOKEN``;
- ``$XDG_CONFIG_HOME/vmsched/config.toml`` (``~/.config/vmsched/config.toml``), or the file
  ``VMSCHED_CONFIG`` names: ``url = "..."`` and ``token = "..."``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vmsched_client.errors import ConfigError

DEFAULT_URL = "http://127.0.0.1:8000"


def config_path(environ: Mapping[str, str]) -> Path:
    """The config file: ``VMSCHED_CONFIG``, else ``vmsched/config.toml`` under the XDG config home."""
    if environ.get("VMSCHED_CONFIG"):
        return Path(environ["VMSCHED_CONFIG"]).expanduser()
    home = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".config")
    return Path(home) / "vmsched" / "config.toml"


def _read_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from error
    try:
        found = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from error
    unknown = set(found) - {"url", "token"}
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))} (it takes url and token)")
    for key, value in found.items():
        if not isinstance(value, str):
            raise ConfigError(f"{path}: {key} must be a string")
    return {key: str(value) for key, value in found.items()}


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """The API's base URL and the bearer token sent with every request (None: none is sent)."""

    url: str = DEFAULT_URL
    token: str | None = None

    def __repr__(self) -> str:
        # Never the secret: a config ends up in tracebacks and logs.
        return f"ClientConfig(url={self.url!r}, token={'***' if self.token else None})"

    @classmethod
    def load(
        cls, url: str | None = None, token: str | None = None, environ: Mapping[str, str] | None = None
    ) -> ClientConfig:
        """What the arguments say, else ``VMSCHED_URL``/``VMSCHED_TOKEN``, else the config file."""
        environ = os.environ if environ is None else environ
        file = _read_file(config_path(environ))
        chosen_url = url or environ.get("VMSCHED_URL") or file.get("url") or DEFAULT_URL
        chosen_token = token or environ.get("VMSCHED_TOKEN") or file.get("token") or None
        return cls(url=chosen_url.rstrip("/"), token=chosen_token)
