"""Enrolling an agent: a broker user of its own for one host (``vmsched-gateway enroll-agent``).

Through RabbitMQ's management HTTP API (the ``rabbitmq_management`` plugin, VMSCHED_AMQP_ADMIN_URL),
the user ``agent-<host id>[@<vhost>]`` gets a fresh random password and, in the installation's
virtual host, exactly what an agent needs (:func:`agent_permissions`):

- read (consume) its own queue ``agent.<host id>`` and nothing else;
- write to the exchange ``vmsched`` with the routing keys ``agent.heartbeat`` and ``vm.status``
  only (topic permissions), and to ``vmsched.dlx`` with its own host id only (a command it cannot
  decode is dead-lettered under the key it came with);
- configure nothing (it declares its queue passively, which needs no permission).

Enrolling again gives the same user a new password: the rotation. Connections open with the old one
stay open until they close (``rabbitmqctl close_all_user_connections`` ends them at once).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from vmsched_amqp import topology
from vmsched_amqp.agent_identity import AgentCredentials, agent_username, vhost_of, with_credentials
from vmsched_runtime.settings import Settings

NOTHING = "^$"
TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class TopicPermission:
    exchange: str
    write: str
    read: str = NOTHING


@dataclass(frozen=True, slots=True)
class Permissions:
    """RabbitMQ's regular expressions: configure, write and read on resources, and per topic exchange
    the routing keys a user may publish with (write) or bind with (read)."""

    configure: str
    write: str
    read: str
    topics: tuple[TopicPermission, ...]


def _exactly(*names: str) -> str:
    return "^(" + "|".join(re.escape(name) for name in names) + ")$"


def agent_permissions(host_id: str) -> Permissions:
    """What host ``host_id``'s agent may do in the installation's virtual host."""
    return Permissions(
        configure=NOTHING,
        write=_exactly(topology.EXCHANGE.name, topology.DEAD_LETTER_EXCHANGE.name),
        read=_exactly(topology.agent_queue_name(host_id)),
        topics=(
            TopicPermission(topology.EXCHANGE.name, write=_exactly(topology.AGENT_HEARTBEAT, topology.VM_STATUS)),
            TopicPermission(topology.DEAD_LETTER_EXCHANGE.name, write=_exactly(host_id)),
        ),
    )


class EnrollmentError(Exception):
    """The broker's management API did not do what was asked; the text says what to check."""


class BrokerAdmin:
    """The management API of the installation's broker, as the services' own user."""

    def __init__(self, management_url: str, amqp_url: str, *, timeout: float = TIMEOUT) -> None:
        url = httpx.URL(management_url)
        self.amqp_url = amqp_url
        self.vhost = vhost_of(amqp_url)
        self._base = str(url.copy_with(username=None, password=None)).rstrip("/") + "/api"
        self._client = httpx.AsyncClient(auth=(url.username, url.password) if url.username else None, timeout=timeout)

    @classmethod
    def of(cls, settings: Settings) -> BrokerAdmin:
        return cls(settings.management_url, str(settings.amqp_url))

    async def __aenter__(self) -> BrokerAdmin:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._client.aclose()

    async def enroll(self, host_id: str) -> AgentCredentials:
        """Create host ``host_id``'s broker user, or give it a new password, with an agent's permissions."""
        username = agent_username(host_id, self.vhost)
        password = secrets.token_urlsafe(24)
        user, vhost = quote(username, safe=""), quote(self.vhost, safe="")
        permissions = agent_permissions(host_id)
        await self._put(f"users/{user}", {"password": password, "tags": ""})
        await self._put(
            f"permissions/{vhost}/{user}",
            {"configure": permissions.configure, "write": permissions.write, "read": permissions.read},
        )
        for topic in permissions.topics:
            await self._put(
                f"topic-permissions/{vhost}/{user}",
                {"exchange": topic.exchange, "write": topic.write, "read": topic.read},
            )
        return AgentCredentials(
            host_id=host_id,
            username=username,
            password=password,
            amqp_url=with_credentials(self.amqp_url, username, password),
        )

    async def revoke(self, host_id: str) -> bool:
        """Delete host ``host_id``'s broker user (RabbitMQ closes its connections); False if it had none."""
        user = quote(agent_username(host_id, self.vhost), safe="")
        response = await self._call("DELETE", f"users/{user}")
        return response.status_code != 404

    async def _put(self, path: str, body: dict[str, str]) -> None:
        await self._call("PUT", path, body)

    async def _call(self, method: str, path: str, body: dict[str, str] | None = None) -> httpx.Response:
        url = f"{self._base}/{path}"
        try:
            response = await self._client.request(method, url, json=body)
        except httpx.TransportError as error:
            raise EnrollmentError(
                f"cannot reach RabbitMQ's management API at {self._base} (VMSCHED_AMQP_ADMIN_URL): {error!r}; "
                "is its plugin enabled (rabbitmq-plugins enable rabbitmq_management)?"
            ) from None
        if response.status_code in (401, 403):
            raise EnrollmentError(
                f"RabbitMQ's management API refused {method} {path} ({response.status_code}): its user needs the "
                "administrator tag (VMSCHED_AMQP_ADMIN_URL, or VMSCHED_AMQP_URL's user)"
            )
        if response.is_error and response.status_code != 404:
            raise EnrollmentError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        if response.status_code == 404 and method != "DELETE":
            raise EnrollmentError(f"{method} {path}: 404 (does the virtual host {self.vhost!r} exist?)")
        return response
