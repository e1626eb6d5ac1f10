"""Who an agent is on the broker: every host has a RabbitMQ user of its own (docs/security.md).

The user's name says which host it speaks for: ``agent-<host id>`` in the default virtual host
``/``, ``agent-<host id>@<vhost>`` in any other. RabbitMQ's users are shared by every virtual host
of a broker, so the suffix keeps two installations (or two test runs) on one broker apart. The
gateway maps a message's AMQP ``user_id`` (which RabbitMQ verifies) back to a host with
:func:`host_of_username`; ``vmsched-gateway enroll-agent`` names the user with :func:`agent_username`.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import MultiHostUrl

from vmsched_contract.messages import HostId

AGENT_USER_PREFIX = "agent-"
DEFAULT_VHOST = "/"
_HOST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # messages.HostId's pattern


class AgentCredentials(BaseModel):
    """One host's broker credentials: what ``vmsched-gateway enroll-agent`` prints (one JSON line)
    and what the agent SDK reads (``vmsched-agent simulate --credentials``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    host_id: HostId
    username: str = Field(min_length=1)
    password: str = Field(min_length=1, repr=False)
    amqp_url: str = Field(min_length=1, repr=False, description="the broker URL with these credentials")


def vhost_of(amqp_url: str | MultiHostUrl) -> str:
    """The virtual host an AMQP URL names (``/`` when its path is empty or ``/``), as aio-pika reads it."""
    parsed = amqp_url if isinstance(amqp_url, MultiHostUrl) else MultiHostUrl(str(amqp_url))
    return unquote((parsed.path or "/")[1:]) or DEFAULT_VHOST


def agent_username(host_id: str, vhost: str) -> str:
    """The broker user of host ``host_id`` in virtual host ``vhost``."""
    if not _HOST_ID.match(host_id):
        raise ValueError(f"not a host id: {host_id!r}")
    name = AGENT_USER_PREFIX + host_id
    return name if vhost == DEFAULT_VHOST else f"{name}@{vhost}"


def host_of_username(username: str, vhost: str) -> str | None:
    """The host whose agent user ``username`` is in ``vhost``; None for any other user (a service's,
    another virtual host's agent, or a name that is no agent's)."""
    suffix = "" if vhost == DEFAULT_VHOST else f"@{vhost}"
    if not username.startswith(AGENT_USER_PREFIX) or not username.endswith(suffix):
        return None
    host_id = username[len(AGENT_USER_PREFIX) : len(username) - len(suffix)]
    return host_id if _HOST_ID.match(host_id) else None


def with_credentials(amqp_url: str | MultiHostUrl, username: str, password: str) -> str:
    """``amqp_url`` (every node, the virtual host, the query) with another user and password."""
    parsed = amqp_url if isinstance(amqp_url, MultiHostUrl) else MultiHostUrl(str(amqp_url))
    nodes = ",".join(f"{host['host']}:{host['port']}" if host["port"] else str(host["host"]) for host in parsed.hosts())
    query = f"?{parsed.query}" if parsed.query else ""
    return f"{parsed.scheme}://{quote(username, safe='')}:{quote(password, safe='')}@{nodes}{parsed.path or '/'}{query}"
