"""An agent's broker credentials, as ``vmsched-gateway enroll-agent`` prints them: one JSON object a
line, ``{"host_id", "username", "password", "amqp_url"}`` (docs/agent-sdk.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from vmsched_amqp.agent_identity import AgentCredentials

_MANY = TypeAdapter(list[AgentCredentials])


def parse_credentials(text: str) -> dict[str, AgentCredentials]:
    """Credentials by host id, from JSON lines (enroll-agent's output, concatenated) or a JSON array.
    Raises ValueError naming the first bad line or host given twice."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            items = _MANY.validate_json(stripped)
        except ValidationError as error:
            raise ValueError(f"credentials: {error.errors()[0]['msg']} at {error.errors()[0]['loc']}") from None
    else:
        items = []
        for number, line in enumerate(stripped.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(AgentCredentials.model_validate(json.loads(line)))
            except (ValueError, ValidationError) as error:
                first = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
                raise ValueError(f"credentials line {number}: {first}") from None
    by_host: dict[str, AgentCredentials] = {}
    for item in items:
        if item.host_id in by_host:
            raise ValueError(f"credentials: host {item.host_id} given twice")
        by_host[item.host_id] = item
    return by_host


def read_credentials(path: Path) -> dict[str, AgentCredentials]:
    """:func:`parse_credentials` of a file (``-``: standard input)."""
    return parse_credentials(sys.stdin.read() if str(path) == "-" else path.read_text())
