"""A RabbitMQ cluster of three nodes on this machine (devtools.broker_node each), for the cluster
fault test and for trying vmsched against a cluster by hand (deploy/local-cluster.sh).

The nodes share the rabbitmq user's Erlang cookie, so they can join one another, and
``VMSCHED_AMQP_URL`` names all three (vmsched_amqp.nodes): a service connected to a node that
dies reconnects to the next one.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devtools.broker_node import BrokerNode

SIZE = 3


@dataclass(frozen=True, slots=True)
class QueueMembers:
    name: str
    members: int  # nodes holding a replica of the quorum queue
    online: int  # of those, the ones up and in the queue's Raft group


@dataclass
class BrokerCluster:
    nodes: list[BrokerNode]

    @property
    def amqp_url(self) -> str:
        return "amqp://guest:guest@" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes) + "/"

    def start(self) -> None:
        """Start every node, then join the others to the first (a fresh node only: a node that has
        been in the cluster rejoins by itself when restarted)."""
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(BrokerNode.start, self.nodes))
        seed = self.nodes[0]
        for node in self.nodes[1:]:
            node.rabbitmqctl("stop_app")
            node.rabbitmqctl("join_cluster", seed.node)
            node.rabbitmqctl("start_app")
        seed.rabbitmqctl("await_online_nodes", str(len(self.nodes)))

    def stop(self) -> None:
        """Stop every node and remove its data."""
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(BrokerNode.stop, self.nodes))

    def running_nodes(self) -> int:
        """Nodes the cluster counts as running, as a surviving node sees it."""
        for node in self.nodes:
            with contextlib.suppress(Exception):
                status = json.loads(node.rabbitmqctl("cluster_status", "--formatter", "json", timeout=30))
                return len(status.get("running_nodes", []))
        return 0

    def quorum_queues(self, vhost: str = "/") -> list[QueueMembers]:
        """Every quorum queue of ``vhost`` with its replicas, as a running node lists them."""
        for node in self.nodes:
            try:
                output = node.rabbitmqctl(
                    "list_queues", "-p", vhost, "name", "type", "members", "online", "--formatter", "json", timeout=60
                )
            except Exception:  # a node that is down: ask the next one
                continue
            return [
                QueueMembers(row["name"], len(row["members"]), len(row["online"]))
                for row in json.loads(output)
                if row.get("type") == "quorum"
            ]
        raise RuntimeError("no node of the cluster answers")


def cluster_of(name: str, base: Path, *, first_port: int | None = None) -> BrokerCluster:
    """``SIZE`` nodes named ``<name>-a``, ``-b``, ... with data under ``base``; AMQP ports from
    ``first_port`` on (distribution ports 20,000 above) when given, else free ones."""
    nodes = []
    for index in range(SIZE):
        suffix = "abcdefgh"[index]
        if first_port is None:
            node = BrokerNode(f"{name}-{suffix}", base / suffix)
        else:
            port = first_port + index
            node = BrokerNode(f"{name}-{suffix}", base / suffix, port=port, dist_port=port + 20000)
        nodes.append(node)
    return BrokerCluster(nodes)


@contextlib.contextmanager
def broker_cluster(name: str, base: Path) -> Iterator[BrokerCluster]:
    cluster = cluster_of(name, base)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


# deploy/local-cluster.sh: fixed names and ports, so a second call finds the first's cluster.
LOCAL_NAME = "vmsched-cluster"
LOCAL_BASE = Path("/var/tmp/vmsched-cluster")
LOCAL_FIRST_PORT = 5701


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "status"
    cluster = cluster_of(LOCAL_NAME, LOCAL_BASE, first_port=LOCAL_FIRST_PORT)
    if command == "start":
        if cluster.running_nodes() == SIZE:
            print(f"already running: {SIZE} nodes")
        else:
            shutil.rmtree(LOCAL_BASE, ignore_errors=True)
            cluster.start()
        print(f"export VMSCHED_AMQP_URL={cluster.amqp_url}")
    elif command == "stop":
        cluster.stop()
        print("stopped")
    elif command == "status":
        running = cluster.running_nodes()
        hint = f"; export VMSCHED_AMQP_URL={cluster.amqp_url}" if running else ""
        print(f"{running} of {SIZE} nodes running{hint}")
        return 0 if running == SIZE else 1
    else:
        print(f"usage: deploy/local-cluster.sh start|stop|status (not {command!r})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
