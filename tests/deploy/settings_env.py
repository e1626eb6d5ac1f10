"""The environment variables the services read, derived from the Settings class itself.

Names come from ``model_config['env_prefix']`` and each field's name, or its ``validation_alias``
where one is set, so these tests follow settings.py (the ``VMSCHED_`` prefix of issue 14 included)
instead of repeating a list that could drift from it.
"""

from __future__ import annotations

import pytest
from pydantic import AliasChoices, AliasPath

from vmsched_runtime.settings import Settings

# What a pod must set because the default only suits a developer's machine (servers on 127.0.0.1,
# an API listening on loopback), by field name; the metrics port too, where a probe uses it.
CONNECTION_FIELDS = ("amqp_url", "redis_url", "database_url")
REQUIRED_FIELDS = {
    "api": (*CONNECTION_FIELDS, "api_host", "api_port", "log_format"),
    "scheduler": (*CONNECTION_FIELDS, "metrics_host", "metrics_port", "log_format"),
    "gateway": (*CONNECTION_FIELDS, "metrics_host", "metrics_port", "log_format"),
    "migrate": ("database_url",),
}
PREFIX = "VMSCHED_"


def _alias_names(alias: str | AliasChoices | AliasPath | None) -> list[str]:
    if alias is None:
        return []
    if isinstance(alias, str):
        return [alias]
    if isinstance(alias, AliasPath):
        return [str(alias.path[0])]
    return [name for choice in alias.choices for name in _alias_names(choice)]


def environment_names() -> dict[str, str]:
    """Each environment variable the services read, mapped to its Settings field."""
    prefix = Settings.model_config.get("env_prefix") or ""
    case_sensitive = bool(Settings.model_config.get("case_sensitive", False))
    names: dict[str, str] = {}
    for field, info in Settings.model_fields.items():
        aliases = _alias_names(info.validation_alias)
        # pydantic-settings: an alias replaces prefix + field name (the prefix is not added to it).
        for name in aliases or [prefix + field]:
            names[name if case_sensitive else name.upper()] = field
    return names


def variable_of(field: str) -> str:
    """The environment variable that sets one field (its first alias, if it has several)."""
    for name, named_field in environment_names().items():
        if named_field == field:
            return name
    raise KeyError(field)


def unprefixed_settings() -> list[str]:
    """Settings read without the VMSCHED_ prefix, other than the standard OTEL_* variables."""
    return sorted(name for name in environment_names() if not name.startswith((PREFIX, "OTEL_")))


def prefix_missing_message() -> str:
    unprefixed = unprefixed_settings()
    return (
        f"settings.py reads {len(unprefixed)} settings without the {PREFIX} prefix of issue 14 (item 10), "
        f"e.g. {', '.join(unprefixed[:3])}; the manifests and the compose file use the prefixed names "
        f"(VMSCHED_AMQP_URL, ...), so this passes once Settings.model_config['env_prefix'] is '{PREFIX}'"
    )


def require_prefix() -> None:
    """Fail with one clear line when settings.py does not read the prefixed names yet."""
    if unprefixed_settings():
        pytest.fail(prefix_missing_message(), pytrace=False)
