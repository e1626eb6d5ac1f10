"""One AMQP URL naming every node of a RabbitMQ cluster, and a connection that uses whichever answers.

``VMSCHED_AMQP_URL`` may list several nodes, as libpq and MongoDB URLs do:
``amqp://user:password@rabbit-a:5672,rabbit-b:5672,rabbit-c:5672/vhost``. The credentials and the
virtual host are the cluster's, written once. A client is connected to one node at a time (AMQP
has no more); when that node goes away, every new attempt goes to the next node in turn, so a
cluster that lost one node is reached through the others. aio-pika reconnects to one URL only
(mosquito/aio-pika#141), hence :class:`NodeRotatingConnection`.

Behind one load-balanced name (Kubernetes' Service of a ``RabbitmqCluster``) a single-node URL is
the right one: the Service does the rotation.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
from aio_pika import RobustConnection
from pydantic_core import MultiHostUrl
from yarl import URL

from vmsched_runtime.logs import get_logger
from vmsched_runtime.reachability import CONNECT_TIMEOUT, Server
from vmsched_runtime.settings import Settings

log = get_logger(__name__)

_DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}
# Seconds a reconnection waits, once another node has answered, before using it: the quorum queues
# whose leader was on the lost node elect a new one meanwhile (under a second on this machine). On
# RabbitMQ 3.10, a channel whose first publish to a quorum queue comes before that election has
# every publish to it refused for good, confirmed or not: its queue client starts from the stale
# leader in the queue record. RabbitMQ later made it start from the current leader
# (rabbitmq-server#9241, in 3.11.x and 3.12.x); no later version was tried here.
ELECTION_GRACE = 3.0


def node_urls(url: str | MultiHostUrl) -> tuple[str, ...]:
    """One URL per node, each with the cluster's credentials, virtual host and query."""
    parsed = url if isinstance(url, MultiHostUrl) else MultiHostUrl(str(url))
    hosts = parsed.hosts()
    first = hosts[0]
    user, password = first["username"], first["password"]
    path = parsed.path or "/"
    query = f"?{parsed.query}" if parsed.query else ""
    urls = []
    for host in hosts:
        credentials = ""
        if user is not None:
            credentials = user + (f":{password}" if password is not None else "") + "@"
        port = host["port"] or _DEFAULT_PORTS[parsed.scheme]
        urls.append(f"{parsed.scheme}://{credentials}{host['host']}:{port}{path}{query}")
    return tuple(urls)


class NodeRotatingConnection(RobustConnection):
    """aio-pika's robust connection (channels, consumers and reconnection as ever) that makes each
    connection attempt to the next node of the cluster.

    aio-pika reads ``url`` exactly once per attempt (to open the transport) besides setting it in
    ``__init__``; so the getter hands out the nodes in turn. Starting from a random node would
    spread clients over the cluster; starting from the first keeps a single-node URL's behaviour and
    is what an operator reading the logs expects, and queues live on every node anyway (quorum).
    """

    def __init__(
        self, url: URL, *, nodes: tuple[str, ...] = (), election_grace: float = ELECTION_GRACE, **kwargs: Any
    ) -> None:
        self._nodes = tuple(URL(node) for node in nodes) or (URL(url),)
        self._election_grace = election_grace
        self._turn = 0
        self._last = self._nodes[0]
        super().__init__(url, **kwargs)
        self._turn = 0  # __init__ read it once; the first attempt goes to the first node
        # aio-pika says when a connection is lost and each attempt that fails, not when one succeeds.
        self.reconnect_callbacks.add(self._log_reconnected)

    @property
    def url(self) -> URL:
        node = self._nodes[self._turn % len(self._nodes)]
        self._turn += 1
        self._last = node
        return node

    @url.setter
    def url(self, value: URL) -> None:
        # aio-pika sets it in __init__ (the first node) and on a secret update (a new password):
        # keep each node's host and port, take the credentials.
        self._nodes = tuple(node.with_user(value.user).with_password(value.password) for node in self._nodes)

    async def _on_connected(self) -> None:
        if self.connection_attempt:  # a reconnection (aio-pika counts the connections made)
            await asyncio.sleep(self._election_grace)
        await super()._on_connected()

    def _log_reconnected(self, *_: object) -> None:
        log.info("broker connection restored", node=str(_masked(self._last)))

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    def __str__(self) -> str:
        return ",".join(str(_masked(node)) for node in self._nodes)


def _masked(node: URL) -> URL:
    return node.with_password("******") if node.password else node


async def reach_any_node(settings: Settings) -> None:
    """Return once some node of the cluster answers (that is all the services need), else raise the
    last node's error."""
    failures: list[BaseException] = []
    for node in node_urls(settings.amqp_url):
        try:
            broker = await aio_pika.connect(node, timeout=CONNECT_TIMEOUT)
        except Exception as error:  # reported if every node fails
            failures.append(error)
            continue
        await broker.close()
        return
    raise failures[-1]


def _amqp_url(settings: Settings) -> str:
    return str(settings.amqp_url)


# The broker, as a service's command line checks it before starting (vmsched_runtime.reachability).
BROKER = Server("RabbitMQ", "AMQP_URL", url=_amqp_url, reach=reach_any_node)
